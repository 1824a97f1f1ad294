"""Parse + render throughput of `coda.actions` against the official UI-TARS 0.1.4 parser, on the test corpus.

    python bench/actions.py [--n 20000] [--repeat 7] [--cpu 0]

One process pinned to one core. Each round times ours (`parse_action` + `to_pyautogui`) and then the official parser
(`parse_action_to_structure_output` + `parsing_response_to_pyautogui_code`, `input_swap=False`) on `--n` replies
cycled from `tests/data/uitars_replies.jsonl`; the two alternate round by round so that machine noise hits both alike,
and the median round is reported. The official parser only gets the replies it can parse (its failures are counted
and left out of its timing); ours is timed on every reply and, for the ratio, on the official parser's replies.
Its prints are silenced while it is timed. Parse+render means text in, pyautogui source out.
"""
import contextlib, io, os, statistics, sys, time
from fastcore.script import call_parse
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / 'tests')]
from uitars_ref import load_corpus, official_actions, official_args, run_014  # noqa: E402
from coda.actions import parse_action, to_pyautogui  # noqa: E402
from ui_tars.action_parser import parse_action_to_structure_output, parsing_response_to_pyautogui_code  # noqa: E402

TARGET = 20_000  # replies per second, ours, one core

def cycle(items, n):
    "n items taken round-robin from `items`."
    return [items[i % len(items)] for i in range(n)]

def run_ours(work):
    for text, screen, coords in work:
        to_pyautogui(parse_action(text, screen=screen, coords=coords))

def run_official(work):
    for text, factor, H, W, mt in work:
        parsing_response_to_pyautogui_code(parse_action_to_structure_output(text, factor, H, W, model_type=mt), H, W,
                                           input_swap=False)

def timed(fn, work):
    "Replies per second of one pass of `fn` over `work`, stdout silenced."
    with contextlib.redirect_stdout(io.StringIO()):
        t = time.perf_counter()
        fn(work)
        dt = time.perf_counter() - t
    return len(work) / dt

@call_parse
def main(n:int=20_000,              # replies per timed pass (cycled from the corpus)
         repeat:int=7,              # rounds; each round times both parsers once
         cpu:int=None,              # core to pin to (default: the first allowed one)
         strict:bool=False,         # exit 1 when the target is not met
        ):
    "Parse + render throughput of coda.actions against the official UI-TARS parser"

    if hasattr(os, 'sched_setaffinity'):
        cpu = cpu if cpu is not None else min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
    corpus = load_corpus()
    # which replies the official parser can take: it must not raise, and its code must compile
    raises = uncompilable = 0
    good = []
    for e in corpus:
        r = run_014(e)
        if r['error']:
            raises += 1
            continue
        try: official_actions(r)
        except SyntaxError: uncompilable += 1
        good.append(e)  # uncompilable code still costs the official parser its full work: keep it in the timing
    ours_work = cycle([(e['text'], tuple(e['screen']), e['coords']) for e in corpus], n)
    same_work = cycle([(e['text'], tuple(e['screen']), e['coords']) for e in good], n)
    off_work = cycle([(e['text'], *official_args(e)) for e in good], n)

    run_ours(ours_work[:200])
    timed(run_official, off_work[:200])  # warm-up
    ours, same, off = [], [], []
    for _ in range(repeat):
        ours.append(timed(run_ours, ours_work))
        off.append(timed(run_official, off_work))
        same.append(timed(run_ours, same_work))

    print(f'corpus: {len(corpus)} replies; official 0.1.4 raises on {raises}, emits uncompilable code for {uncompilable}')
    print(f'{n} replies per pass, {repeat} interleaved rounds, one process'
          + (f' pinned to cpu {cpu}' if hasattr(os, 'sched_setaffinity') else ''))
    print()
    rows = [('coda.actions, all replies', len(corpus), ours),
            ('coda.actions, replies official can parse', len(good), same),
            ('ui-tars 0.1.4, replies it can parse', len(good), off)]
    print(f"{'parser':45s} {'replies':>7s} {'median/s':>10s} {'min/s':>10s} {'max/s':>10s}")
    for name, k, xs in rows:
        print(f'{name:45s} {k:7d} {statistics.median(xs):10,.0f} {min(xs):10,.0f} {max(xs):10,.0f}')
    mo, ms, mf = statistics.median(ours), statistics.median(same), statistics.median(off)
    print()
    print(f'ratio ours / official, same replies (median): {ms / mf:.2f}x')
    print(f'target {TARGET:,} replies/s (ours, all replies, one core): {"met" if mo >= TARGET else "NOT met"} ({mo:,.0f}/s)')
    if strict and mo < TARGET: sys.exit(1)
