"""How long `coda.viewer.to_html` takes on a large run, and how big the page is; optionally the README's picture of it.

    python bench/viewer.py [--episodes 600] [--steps 3] [--figure figures/viewer.png]

A synthetic run of `--episodes` episodes (three apps, mixed outcomes, `--steps` steps of small PNGs with a click
each, final screens, a judge's verdicts on the finished ones) is built in a temporary folder (in memory, /dev/shm,
when there is one), then the viewer is written three times; the median time and the page's size are printed, with
how much of the page is the episodes' templates (what the browser parses but does not show until their page comes).
`--figure` also writes a screenshot of the viewer on a small realistic run (the scidesk apps' real opening screens,
real task instructions) taken in headless Chromium through Playwright, as a PNG under 200 KB.
"""
import io, shutil, statistics, sys, tempfile, time
from pathlib import Path
from fastcore.script import call_parse
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]
from coda.records import Judgment, Labels  # noqa: E402
from coda.store import RunStore, file_judgment  # noqa: E402
from coda.viewer import to_html  # noqa: E402

APPS = ('Algebra', 'Biochem', 'Astronomy')
RESULTS = (dict(status='done', stop='ANS', score=1.0), dict(status='done', stop='DONE', score=0.0),
           dict(status='error', stop='ERROR', score=0.0, reason='executor reply unparsable'), dict(status='done', stop='ANS', score=1.0))

def png(im:Image.Image)->bytes:
    b = io.BytesIO()
    im.save(b, 'PNG')
    return b.getvalue()

def episode(st:RunStore, app:str, task:str, instruction:str, shots:list, result:dict|None, judge:str|None, clicks:list):
    "One stored episode: a step per screenshot (a click each), the final screen, the result and the judge's verdict"
    w = st.start(app, task, 0, {'instruction': instruction})
    for i, (shot, (x, y)) in enumerate(zip(shots, clicks)):
        rec = {'step': i, 'kind': 'click', 'planner': f'Thought: the control I need is at ({x}, {y}); I click it.\nAction: click',
               'executor': f"click(start_box='({x},{y})')", 'actions': [{'kind': 'click', 'x': x, 'y': y}], 'planner_s': 1.2, 'executor_s': 0.4}
        w.add_step(rec, shot)
    if result is None: return w.abandon()
    w.add_final(shots[-1])
    w.finish({**result, 'steps': len(shots), 'seconds': 4.2 * len(shots)})
    if judge and result['status'] == 'done':
        ok = result['score'] >= 1
        labels = Labels.success(len(shots)) if ok else Labels.first_error(1)
        file_judgment(st.root, Judgment(key=(app, task, 0), judge=judge, accepted=ok, label=int(ok), labels=labels), fsync=False)

def synthetic(root:Path, n:int, steps:int)->Path:
    "A run of n episodes with small PNGs"
    st = RunStore(root, {'screen': [1280, 800]}, fsync=False)
    shots = [png(Image.new('RGB', (160, 100), (40 * k % 256, 120, 200))) for k in range(steps)]
    for i in range(n):
        result = None if i % 7 == 6 else RESULTS[i % len(RESULTS)]
        episode(st, APPS[i % 3], f'T-{i:04d}', f'Task {i}: do something in {APPS[i % 3]}.', shots, result, 'judge', [(200 + 40 * k, 300) for k in range(steps)])
    return root

def realistic(root:Path)->Path:
    "A small run with the scidesk apps' real opening screens and task instructions"
    from coda.envs.scidesk import scidesk_tasks
    from coda.taskgen import opening_screenshot
    st = RunStore(root, {'screen': [1280, 800]}, fsync=False)
    for k, app in enumerate(APPS):
        shot = png(opening_screenshot(app))
        for j, t in enumerate(scidesk_tasks([app])[:2]):
            result = RESULTS[(k + j) % len(RESULTS)] if (k, j) != (2, 1) else None
            episode(st, app, t.id, t.instruction, [shot] * 3, result, 'qwen2.5-vl-72b', [(320, 240), (640, 410), (900, 560)])
    return root

def snapshot(run:Path, out:Path):
    "A screenshot of the run's viewer in headless Chromium, as a PNG under 200 KB"
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=shutil.which('chromium'), args=['--no-sandbox'])
        page = b.new_page(viewport={'width': 1400, 'height': 1000})
        page.goto(to_html(run).resolve().as_uri())
        page.wait_for_selector('#eps section img')
        page.evaluate("Promise.all([...document.querySelectorAll('#eps img')].slice(0, 4).map(i => i.decode().catch(() => null)))")
        im = Image.open(io.BytesIO(page.screenshot())).convert('RGB')
        b.close()
    im = im.resize((1120, 800), Image.LANCZOS).quantize(256, method=Image.Quantize.FASTOCTREE)   # 35 KB, the colours kept
    im.save(out, optimize=True)
    print(f'figure: {out} ({out.stat().st_size / 1024:.0f} KB)')

@call_parse
def main(episodes:int=600,   # episodes in the synthetic run
         steps:int=3,        # steps per episode
         figure:str=None,    # also write a screenshot of the viewer on a small realistic run here (e.g. figures/viewer.png)
        ):
    shm = Path('/dev/shm')
    tmp = Path(tempfile.mkdtemp(prefix='coda-bench-viewer-', dir=shm if shm.is_dir() else None))
    try:
        t = time.perf_counter()
        run = synthetic(tmp/'run', episodes, steps)
        print(f'built {episodes} episodes x {steps} steps in {time.perf_counter() - t:.2f} s ({tmp})')
        ts = []
        for _ in range(3):
            t = time.perf_counter()
            page = to_html(run)
            ts.append(time.perf_counter() - t)
        doc = page.read_text()
        tpl = sum(len(s) for s in doc.split('<template')[1:])
        print(f'to_html: {statistics.median(ts):.3f} s median of 3 ({1e3 * statistics.median(ts) / episodes:.2f} ms an episode)')
        print(f'page: {len(doc.encode()) / 1024:.0f} KB, {doc.count("<template")} episode templates ({100 * tpl / len(doc):.0f}% of it), '
              f'{doc.count("<img")} images referenced')
        if figure: snapshot(realistic(tmp/'small'), Path(figure))
    finally: shutil.rmtree(tmp, ignore_errors=True)
