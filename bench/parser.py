"""Parser throughput of `coda.actions.parse_action` on long replies of hostile shapes, and where the time goes.

    python bench/parser.py [--sizes 1000 64000 1000000] [--repeat 5] [--cpu 0] [--strict]

One process pinned to one core. Each shape of `tests/test_parser_limits.SHAPES` (letters, spaces, parentheses,
quotes, backslashes, nested brackets, repeated `Action:` labels, many calls, sloppy quoting, ...) plus a realistic
long reply (a long `Thought:` and one action) is built at each size and parsed `--repeat` times; the median is
reported as milliseconds per reply and MB/s (characters, counted as bytes). A quadratic parser shows as MB/s that
falls with size; a linear one keeps it flat. Then one profile of every shape at the largest size says which
functions the time goes to. Replies over `MAX_REPLY` characters are refused unparsed (one `invalid` action), so
sizes above it measure that refusal.
"""
import cProfile, io, os, pstats, statistics, sys
from fastcore.script import call_parse
from typing import Annotated
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / 'tests')]
from test_parser_limits import SHAPES, shape  # noqa: E402
from coda.actions import MAX_REPLY, parse_action  # noqa: E402
from timing import timed  # noqa: E402

TARGET_S = 0.25  # seconds per 1 MB reply, any shape, one core: "well under a second"

def realistic(n:int)->str:
    "A long but ordinary reply: n characters of thought, then one click"
    words = 'The Evaluate button is below the input field, so I will click it and then read the result. '
    return 'Thought: ' + (words * (n // len(words) + 1))[:n] + "\nAction: click(start_box='<|box_start|>(644,406)<|box_end|>')"

def build(name:str, n:int)->str: return realistic(n) if name == 'realistic long thought' else shape(name, n)

def median_s(text:str, repeat:int)->float:
    "Median seconds of `repeat` parses of `text`"
    return statistics.median(timed(lambda i: parse_action(text), repeat))

@call_parse
def main(sizes:Annotated[int, {'nargs': '+'}]=[1_000, 64_000, 1_000_000],  # reply lengths in characters
         repeat:int=5,              # parses per shape and size (the median is reported)
         cpu:int=None,              # core to pin to (default: the first allowed one)
         strict:bool=False,         # exit 1 when a 1 MB reply takes over TARGET_S seconds
        ):
    "Parser time on hostile reply shapes at growing lengths"
    if hasattr(os, 'sched_setaffinity'):
        cpu = cpu if cpu is not None else min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
    names = ['realistic long thought', *SHAPES]
    parse_action(build('calls', 10_000))   # warm-up: regex compilation, caches
    print(f'parse_action on {len(names)} shapes x {len(sizes)} sizes, median of {repeat}, one process'
          + (f' pinned to cpu {cpu}' if hasattr(os, 'sched_setaffinity') else '') + f'; MAX_REPLY = {MAX_REPLY:,} characters')
    print()
    head = f"{'shape':24s}" + ''.join(f"{f'{n:,} ch: ms':>18s}{'MB/s':>8s}" for n in sizes)
    print(head)
    print('-' * len(head))
    worst, big = {}, max(sizes)
    for name in names:
        row = f'{name:24s}'
        for n in sizes:
            text = build(name, n)
            s = median_s(text, repeat)
            row += f'{s * 1000:18.2f}{len(text) / s / 1e6 if s else float("inf"):8.1f}'
            if n == big: worst[name] = s
        print(row, flush=True)
    print()
    slowest = sorted(worst.items(), key=lambda kv: -kv[1])[:5]
    print(f'slowest at {big:,} characters: ' + ', '.join(f'{k} {v * 1000:.0f} ms' for k, v in slowest))

    texts = [build(name, big) for name in names]   # where the time goes: one profile over every shape at the largest size
    pr = cProfile.Profile()
    pr.enable()
    for t in texts: parse_action(t)
    pr.disable()
    out = io.StringIO()
    st = pstats.Stats(pr, stream=out)
    st.sort_stats('tottime')
    total = sum(v[2] for v in st.stats.values())
    print(f'\nwhere the time goes ({len(texts)} replies of {big:,} characters, {total:.2f} s under the profiler, own time):')
    for (f, line, fn), v in sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:10]:
        print(f'  {v[2] / total:6.1%}  {v[2] * 1000:8.1f} ms  {v[1]:>8,} calls  {Path(f).name}:{line}({fn})')
    ok = max(worst.values()) <= TARGET_S if big >= 1_000_000 else True
    print(f'\ntarget {TARGET_S} s per 1 MB reply, any shape, one core: ' + ('met' if ok else 'NOT met')
          + f' (slowest {max(worst.values()) * 1000:.0f} ms at {big:,} characters)')
    if strict and not ok: sys.exit(1)
