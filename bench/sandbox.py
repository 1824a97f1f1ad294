"""What the sandbox (`coda.envs.sandbox`) costs: starting one, starting a desktop with and without it, and starting a
program inside it against starting it plainly. Runs alternate (with, without, with, ...) so the machine's noise falls on
both sides alike; each line prints min / median / max.

Usage: python bench/sandbox.py [--rounds 10]
"""
import statistics, subprocess, tempfile
from pathlib import Path
from fastcore.script import call_parse
from coda.envs.sandbox import Sandbox
from coda.envs.desktop import Desktop
from timing import timed

def line(name, xs): return f"  {name:<44} {min(xs) * 1000:7.1f} / {statistics.median(xs) * 1000:7.1f} / {max(xs) * 1000:7.1f} ms"

@call_parse
def main(rounds:int=10, # alternating rounds of each measurement
        ):
    "Print the sandbox's costs"
    folder = Path(tempfile.mkdtemp(prefix='coda-bench-sandbox-'))
    sb_start, desk = [], {'required': [], 'off': []}
    for _ in range(rounds):
        s = Sandbox(folder)
        sb_start += timed(lambda i: s.start())
        kind = s.kind
        s.close()
        for mode in ('required', 'off'):
            d = Desktop(wm=None, bus=False, confine=mode)
            desk[mode] += timed(lambda i: d.start())
            d.close()
    print(f"sandbox kind here: {kind} (min / median / max of {rounds})")
    print(line('Sandbox.start (the holder: mounts, loopback)', sb_start))
    print(line('Desktop.start, sandboxed', desk['required']))
    print(line('Desktop.start, CODA_SANDBOX=off', desk['off']))
    with Sandbox(folder) as s:
        inside, plain = [], []
        for _ in range(rounds):
            inside += timed(lambda i: s.run(['true'], check=True))
            plain += timed(lambda i: subprocess.run(['true'], check=True))
    print(line("a program started inside ('true')", inside))
    print(line("the same started plainly", plain))
