"""The run's HTML trajectory viewer (coda.viewer): the summary's numbers, the judges' verdicts and step labels, final
screens, escaping of everything read from the run, damaged episodes shown without crashing, and only one page of
episodes in the document; then the same pages in a real headless Chromium (filters, pages, zoom, images), driven by
Playwright."""
import io, os, re, shutil, tempfile
from collections import Counter
from pathlib import Path
from urllib.parse import unquote
import pytest
from PIL import Image
from needs import caught, need_programs
from coda.records import Judgment, Labels
from coda.store import RunStore, file_judgment, judge_names, judgment_path
from coda.viewer import to_html

APPS = ('Algebra', 'Biochem', 'Astronomy')
OUTCOMES = ('success', 'fail', 'error', 'unscored', 'unfinished')
CYCLE = ('success', 'fail', 'success', 'error', 'unscored', 'success', 'fail', 'unfinished')   # uneven: every count differs
RESULTS = dict(success=dict(status='done', stop='ANS', score=1.0, steps=2), fail=dict(status='done', stop='ANS', score=0.0, steps=2),
               unscored=dict(status='unscored', stop='DONE', score=None, steps=2))
REASONS = ('executor reply unparsable', 'model server went away')

def png(i:int, size=(64, 40))->bytes:
    "A small PNG, its colour from `i`"
    b = io.BytesIO()
    Image.new('RGB', size, ((i * 40) % 256, (i * 90) % 256, 200)).save(b, 'PNG')
    return b.getvalue()

def spec(n:int)->list:
    "n episodes as (app, task, outcome): every app with every outcome in 24, every fourth task id with a space (an escaped folder name)"
    return [(APPS[i % 3], f"{APPS[i % 3][:3]}{' ' if i % 4 == 0 else '-'}{i:03d}", CYCLE[i % 8]) for i in range(n)]

def build(root:Path, eps:list, judged:bool=True)->Path:
    "A run folder with episodes `eps` (2 steps each, a click per step, final screens), judged by 'judge' (and 'qwen 72b' on every other)"
    st = RunStore(root, {'screen': [1280, 800]}, fsync=False)
    for i, (app, task, out) in enumerate(eps):
        w = st.start(app, task, 0, {'instruction': f'Do {task} in {app}.'})
        for k in range(2): w.add_step({'step': k, 'planner': f'Thought: step {k}', 'actions': [{'kind': 'click', 'x': 320 * (k + 1), 'y': 200}]}, png(i))
        if out == 'unfinished':
            w.abandon()
            continue
        w.add_final(png(i + 1))
        w.finish(RESULTS.get(out) or dict(status='error', stop='ERROR', score=0.0, reason=REASONS[i % 2]))
        if judged and out != 'error':
            ok = out == 'success'
            labels = Labels.success(2) if ok else Labels.first_error(1)
            file_judgment(root, Judgment(key=(app, task, 0), judge='judge', accepted=ok, label=int(ok), labels=labels), fsync=False)
            if i % 2: file_judgment(root, Judgment(key=(app, task, 0), judge='qwen 72b', label=-1), fsync=False)
    return root

def label(app, task): return f'{app} / {task} / #0'

def live(doc:str)->str:
    "The page without its templates: what is in the document before the script runs"
    return re.sub(r'<template.*?</template>', '', doc, flags=re.S)

def templates(doc:str)->dict:
    "{label: the template's HTML} of every episode"
    return {m[1]: m[0] for m in re.finditer(r'<template class="ep"[^>]*data-label="([^"]*)".*?</template>', doc, flags=re.S)}

@pytest.fixture(scope='module')
def small(tmp_path_factory):
    "A judged run of 45 episodes (3 pages) and its spec"
    eps = spec(45)
    return build(tmp_path_factory.mktemp('small')/'run', eps), eps

@pytest.fixture(scope='module')
def big(tmp_path_factory):
    "A 600-episode run, not judged: 4,200 files, so in memory (/dev/shm) where there is one (0.8 s there, 5-12 s on a busy disk)"
    shm = Path('/dev/shm')
    root = Path(tempfile.mkdtemp(prefix='coda-viewer-', dir=shm)) if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path_factory.mktemp('big')
    yield build(root/'run', spec(600), judged=False)
    shutil.rmtree(root, ignore_errors=True)

# ------------------------------------------------------------------ the page as written
def test_summary_counts_outcomes_by_app_errors_and_verdicts(small):
    run, eps = small
    doc = to_html(run).read_text()
    for app in APPS + (None,):
        c = Counter(o for a, _, o in eps if app in (None, a))
        key = f'app:{app}' if app else 'all'
        for o in OUTCOMES: assert f'<td data-n="{key}/{o}">{c[o]}</td>' in doc, (key, o)
        assert f'<td data-n="{key}/rate">{100 * c["success"] / (c["success"] + c["fail"] + c["error"]):.1f}%</td>' in doc
    errs = Counter(REASONS[i % 2] for i, (_, _, o) in enumerate(eps) if o == 'error')
    for why, k in errs.items(): assert f'<td data-n="error/ERROR/{why}">{k}</td>' in doc
    c = Counter(o for _, _, o in eps)
    assert f'<td data-n="judge:judge/accepted">{c["success"]}</td>' in doc and f'<td data-n="judge:judge/rejected">{c["fail"] + c["unscored"]}</td>' in doc
    assert f'<td data-n="judge:judge/unjudged">{c["error"] + c["unfinished"]}</td>' in doc
    assert f'<td data-n="judge:judge/agree">{c["success"] + c["fail"]} of {c["success"] + c["fail"]}</td>' in doc
    n_qwen = sum(1 for i, (_, _, o) in enumerate(eps) if o not in ('error', 'unfinished') and i % 2)
    assert f'<td data-n="judge:qwen 72b/n/a">{n_qwen}</td>' in doc and '<td data-n="judge:qwen 72b/agree">0 of 0</td>' in doc

def test_each_episode_shows_every_judges_verdict_and_labelled_steps(small):
    run, eps = small
    assert judge_names(run) == ['judge', 'qwen 72b']                      # 'qwen 72b' is filed under the escaped folder qwen%2072b
    tpl = templates(to_html(run).read_text())
    assert len(tpl) == len(eps)
    for i, (app, task, o) in enumerate(eps):
        t = tpl[label(app, task)]
        want = {'success': 'judge: accepted', 'fail': 'judge: rejected · first error at step 1', 'unscored': 'judge: rejected · first error at step 1'}.get(o, 'judge: unjudged')
        assert want + '</span>' in t, (o, t[:600])
        assert ('qwen 72b: n/a' if i % 2 and o not in ('error', 'unfinished') else 'qwen 72b: unjudged') in t
        marks = re.findall(r'<div class="step"(?: data-mark="(\w+)")?>', t)
        assert marks == {'success': ['pos', 'pos'], 'fail': ['pos', 'neg'], 'unscored': ['pos', 'neg']}.get(o, ['', '']), (o, marks)
        assert ('✗ judge: first error' in t) == (o in ('fail', 'unscored'))

def test_final_screen_ends_each_finished_episode(small):
    run, eps = small
    tpl = templates(to_html(run).read_text())
    for app, task, o in eps:
        t = tpl[label(app, task)]
        has = re.search(r'<div class="step final"><div class="shot"><img loading="lazy" src="([^"]+)" alt="final screen">', t)
        assert bool(has) == (o != 'unfinished'), (o, task)
        if has: assert t.rindex('class="step final"') > t.rindex('<div class="step"') and has[1].endswith('/final.png')

def test_image_addresses_are_relative_and_percent_encoded(small):
    "A task id with a space has the folder 'Alg%20000': the address must say %2520, or a browser asks for 'Alg 000'"
    run, _ = small
    (run/'sub').mkdir(exist_ok=True)
    out = to_html(run, out=run/'sub'/'v.html')
    srcs = re.findall(r'src="([^"]+)"', out.read_text())
    assert srcs and all(s.startswith('../episodes/') for s in srcs) and any('%2520' in s for s in srcs)
    assert all((out.parent/unquote(s)).is_file() for s in srcs)

def test_600_episodes_put_one_page_in_the_document(big):
    doc = to_html(big).read_text()
    assert doc.count('<template class="ep"') == 600
    assert '<section' not in live(doc) and '<img' not in live(doc)        # every episode waits in its template
    imgs = re.findall(r'<img[^>]*>', doc)
    assert len(imgs) == 600 * 2 + 525 and all(' loading="lazy" ' in i for i in imgs)   # every step's screenshot and each finished episode's final screen
    assert '<body data-per="20">' in doc and '<td data-n="all/episodes">600</td>' in doc
    assert 'data-per="50"' in to_html(big, per_page=50).read_text()

def test_text_from_records_is_escaped(tmp_path):
    "Model output, ids and judge names are untrusted: none of it may become markup (in a template, an attribute or the summary)"
    bad = '"><script>alert(1)</script></template><img src=x onerror=alert(2)>'
    st = RunStore(tmp_path/'run', {}, fsync=False)
    w = st.start(f'App{bad}', f'T{bad}', 0, {'instruction': bad})
    w.add_step({'step': 0, 'planner': bad, 'executor': bad, 'kind': bad, 'error': bad, 'actions': [{'kind': bad, 'x': 1, 'y': 2}]}, png(0))
    w.finish(dict(status='error', stop=bad, score=0.0, reason=bad, answer=bad))
    file_judgment(tmp_path/'run', Judgment(key=(f'App{bad}', f'T{bad}', 0), judge=f'j{bad}', accepted=True, label=1, labels=Labels.success(1)), fsync=False)
    doc = to_html(tmp_path/'run').read_text()
    assert '<script>alert' not in doc and 'onerror=alert' not in doc.replace('onerror=alert(2)&gt;', '')
    assert doc.count('<script>') == 1 and doc.count('<template') == 1 and doc.count('</template>') == 1
    assert f'j{bad}'.replace('<', '&lt;').replace('>', '&gt;').replace('"', '&quot;') + ': accepted' in doc

# ------------------------------------------------------------------ damaged runs (moved from test_store.py)
def test_a_torn_line_shows_its_episode_as_damaged(tmp_path):
    "A corrupt line in the middle of one steps.jsonl used to abort the viewer for the whole run"
    st = RunStore(tmp_path/'run', {'screen': [1280, 800]})
    build(tmp_path/'run', [('Algebra', 'A-01', 'success')], judged=False)
    bad = st.episode_dir('Algebra', 'A-02', 0)
    w = st.start('Algebra', 'A-02', 0, {'instruction': 'x'})
    for i in range(3): w.add_step({'step': i, 'thought': f't{i}'})
    w.finish(RESULTS['success'])
    lines = (bad/'steps.jsonl').read_text().splitlines()
    (bad/'steps.jsonl').write_text('\n'.join([lines[0], lines[1][:9], lines[2]]) + '\n')
    page, msgs = caught(lambda: to_html(st))
    tpl = templates(page.read_text())
    assert any(str(bad/'steps.jsonl') in m for m in msgs)
    assert 'damaged' in tpl[label('Algebra', 'A-02')] and 'data-outcome="unfinished"' in tpl[label('Algebra', 'A-02')]
    assert 'data-outcome="success"' in tpl[label('Algebra', 'A-01')] and '<td data-n="all/unfinished">1</td>' in page.read_text()

def test_hostile_screenshot_names_are_not_followed(tmp_path):
    "A step record naming a screenshot outside its episode folder gives no image"
    secret = tmp_path/'secret.png'
    secret.write_bytes(b'\x89PNG secret')
    st = RunStore(tmp_path/'run', {})
    w = st.start('Algebra', 'A-01', 0)
    w.add_step({'step': 0, 'screenshot': str(secret)})
    w.add_step({'step': 1, 'screenshot': '../../../../secret.png'})
    w.finish(RESULTS['success'])
    assert 'secret' not in to_html(st).read_text()

def test_a_broken_judgment_file_costs_only_itself(small, tmp_path):
    "A judgment file that is not a judgment is skipped with a warning; the judge's other verdicts are shown"
    run, eps = small
    copy = tmp_path/'run'
    shutil.copytree(run, copy)
    app, task, _ = next(e for e in eps if e[2] == 'success')
    judgment_path(copy, 'judge', (app, task, 0)).write_text('{"key": "garbled"')
    page, msgs = caught(lambda: to_html(copy))
    tpl = templates(page.read_text())
    assert any('judge' in m and 'skipped' in m for m in msgs)
    assert 'judge: unjudged' in tpl[label(app, task)] and sum('judge: accepted' in t for t in tpl.values()) >= 1

# ------------------------------------------------------------------ in a real browser
@pytest.fixture(scope='module')
def browser():
    "Debian's Chromium, headless, driven by Playwright (no downloaded browser)"
    sync_api = pytest.importorskip('playwright.sync_api', reason='playwright is not installed (pip install -e .[dev])')
    need_programs('chromium')
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=shutil.which('chromium'), args=['--no-sandbox'])
        yield b
        b.close()

@pytest.fixture
def page(browser):
    "A fresh page whose console errors and uncaught exceptions are collected in `page.errors`"
    pg = browser.new_page(viewport={'width': 1400, 'height': 900})
    pg.errors = []
    pg.on('console', lambda m: pg.errors.append(f'console: {m.text}') if m.type == 'error' else None)
    pg.on('pageerror', lambda e: pg.errors.append(f'pageerror: {e}'))
    yield pg
    pg.close()

def open_viewer(page, run:Path, **kw):
    page.goto(to_html(run, **kw).resolve().as_uri())
    page.wait_for_selector('#eps section')

def shown(page)->list: return page.eval_on_selector_all('#list a', 'as => as.map(a => a.textContent)')

def sections(page)->list: return page.eval_on_selector_all('#eps section h2', 'hs => hs.map(h => h.firstChild.textContent.trim())')

def choose(page, sel, value)->list:
    "Every episode the page lists, over all its pages, once `value` is chosen in filter `sel`"
    page.select_option(sel, value)
    out = shown(page)
    while not page.is_disabled('#next'):
        page.click('#next')
        out += shown(page)
    return out

IMAGES_LOADED = """async () => {
  const out = [];
  for (const img of document.querySelectorAll('#eps img')) {
    img.scrollIntoView();
    if (!img.complete) await Promise.race([new Promise(r => { img.onload = img.onerror = r; }), new Promise(r => setTimeout(r, 5000))]);
    out.push(img.naturalWidth);
  }
  return out;
}"""

def test_browser_page_loads_with_the_right_summary(page, small):
    run, eps = small
    open_viewer(page, run)
    c = Counter(o for _, _, o in eps)
    assert page.inner_text('#line') == f'{len(eps)} episodes: ' + ', '.join(f'{c[o]} {o}' for o in OUTCOMES)
    rate = 100 * c['success'] / (c['success'] + c['fail'] + c['error'])
    assert page.inner_text('td[data-n="all/rate"]') == f'{rate:.1f}%' and page.inner_text('td[data-n="app:Biochem/episodes"]') == '15'
    assert page.inner_text('#count') == f'{len(eps)} of {len(eps)} episodes' and page.inner_text('#pageno') == 'page 1 of 3'
    assert len(sections(page)) == 20 and sections(page) == shown(page)
    assert page.errors == []

def test_browser_filters_hide_the_right_episodes(page, small):
    run, eps = small
    open_viewer(page, run)
    assert sorted(choose(page, '#f-app', 'Biochem')) == sorted(label(a, t) for a, t, _ in eps if a == 'Biochem')
    assert sorted(choose(page, '#f-status', 'error')) == sorted(label(a, t) for a, t, o in eps if a == 'Biochem' and o == 'error')
    page.select_option('#f-app', '')
    for o in OUTCOMES: assert sorted(choose(page, '#f-status', o)) == sorted(label(a, t) for a, t, x in eps if x == o), o
    page.select_option('#f-status', '')
    page.select_option('#f-judge', 'judge')                                         # it rejects every finished episode but the successes
    assert sorted(choose(page, '#f-verdict', 'accepted')) == sorted(label(a, t) for a, t, x in eps if x == 'success')
    assert sorted(choose(page, '#f-verdict', 'rejected')) == sorted(label(a, t) for a, t, x in eps if x in ('fail', 'unscored'))
    page.select_option('#f-judge', 'qwen 72b')
    assert sorted(choose(page, '#f-verdict', 'n/a')) == sorted(label(a, t) for i, (a, t, x) in enumerate(eps) if i % 2 and x not in ('error', 'unfinished'))
    page.select_option('#f-judge', '')                                              # any judge: unjudged means no judge filed one
    assert sorted(choose(page, '#f-verdict', 'unjudged')) == sorted(label(a, t) for a, t, x in eps if x in ('error', 'unfinished'))
    assert page.inner_text('#count') == f"{sum(x in ('error', 'unfinished') for _, _, x in eps)} of {len(eps)} episodes"
    assert all(s == 'unfinished' or s == 'error' for s in page.eval_on_selector_all('#eps section', 'ss => ss.map(s => s.className)'))
    assert page.errors == []

def test_browser_pages(page, small):
    run, _ = small
    open_viewer(page, run)
    order = [label(*e.key[:2]) for e in RunStore(run).episodes()]
    assert shown(page) == order[:20]
    page.click('#next')
    assert shown(page) == sections(page) == order[20:40] and page.inner_text('#pageno') == 'page 2 of 3'
    page.click('#next')
    assert shown(page) == order[40:] and page.is_disabled('#next')
    page.click('#prev')
    assert shown(page) == order[20:40] and not page.is_disabled('#prev')
    assert page.errors == []

def test_browser_zoom_shows_a_screenshot_full_size_with_its_markers(page, small):
    run, _ = small
    open_viewer(page, run)
    assert page.is_hidden('#zoom')
    first = page.locator('#eps .step .shot img').first
    src = first.get_attribute('src')
    first.click()
    assert page.is_visible('#zoom') and page.get_attribute('#zoom img', 'src') == src
    assert page.eval_on_selector('#zoom .shot', 's => s.getBoundingClientRect().width') == 64       # the PNG's own width
    assert page.locator('#zoom .pt').count() == 1
    page.click('#zoom')
    assert page.is_hidden('#zoom')
    first.click()
    page.keyboard.press('Escape')
    assert page.is_hidden('#zoom') and page.errors == []

def test_browser_loads_the_current_pages_images(page, small):
    run, _ = small
    open_viewer(page, run)
    page.click('#next')
    widths = page.evaluate(IMAGES_LOADED)
    assert len(widths) == 20 * 2 + sum(1 for s in page.eval_on_selector_all('#eps section', 'ss => ss.map(s => s.className)') if s != 'unfinished')
    assert all(w == 64 for w in widths), widths                       # escaped folder names (Alg%20000) included
    assert page.errors == []

def test_browser_600_episodes_one_page_in_the_dom(page, big):
    open_viewer(page, big)
    assert page.locator('#eps section').count() == 20 and page.locator('template.ep').count() == 600
    assert page.evaluate("document.querySelectorAll('section').length") == 20       # templates' contents are not in the document
    assert page.inner_text('#pageno') == 'page 1 of 30' and page.errors == []
