"""A small fuzz harness shared by the fuzz tests: feed seeded random inputs to a function, count the inputs, the
exceptions it raised and the inputs it took too long on (hangs), and report the counts at the end of the pytest run
(printed even under `-q`, so CI logs carry them).

A hang is measured in CPU time, this process's (`time.process_time`: every thread, so a target that works in a thread
of its own is measured too), not in wall time: a machine busy with other jobs stretches the wall clock of a fast
input past any fixed limit, and a wall-clock limit of 1 s failed CI that way. Work a target waits for elsewhere
(a child process, a server) costs no CPU time here, so a generous wall-time limit (`wall_factor` times the CPU limit)
still catches an input that blocks."""
import random, time, traceback
from dataclasses import dataclass, field
from typing import Callable, Iterable

REPORT: list = []   # every FuzzCounts of this session, printed by conftest's pytest_terminal_summary

@dataclass
class FuzzCounts:
    "What one fuzz target saw"
    name: str
    inputs: int = 0
    exceptions: int = 0
    hangs: int = 0                    # inputs over the CPU-time limit (or the far larger wall-time one)
    max_s: float = 0.0                # the slowest input's CPU seconds
    max_wall_s: float = 0.0           # the slowest input's wall seconds
    seconds: float = 0.0              # all inputs together, wall seconds
    examples: list = field(default_factory=list)  # the first few failures: (kind, input repr, detail)
    markers: int|None = None          # attack targets: marker files found, written where no input may write (None: not an attack)
    def line(self)->str:
        return (f"{self.name}: {self.inputs} inputs, {self.exceptions} exceptions, {self.hangs} hangs "
                f"(slowest {self.max_s:.3f} s CPU, {self.max_wall_s:.3f} s wall; all {self.seconds:.1f} s)"
                + ('' if self.markers is None else f", {self.markers} markers"))
    def assert_clean(self):
        assert self.exceptions == 0 and self.hangs == 0 and not self.markers, self.line() + '\n' + '\n'.join(map(str, self.examples))

def fuzz(name:str,                 # the target's name in the report
         inputs:Iterable,          # the inputs (a generator is fine)
         fn:Callable,              # called with each input; raising counts as an exception
         limit_s:float=1.0,        # an input using more CPU time than this (this process, all threads) counts as a hang
         expected:tuple=(),        # exception types that are the target's documented rejections, not failures
         wall_factor:float=30.0,   # an input taking more than limit_s * wall_factor of wall time counts as a hang too
        )->FuzzCounts:
    "Run `fn` on every input, counting exceptions and hangs (CPU time over `limit_s`, or wall time far over it)"
    c = FuzzCounts(name)
    t_all = time.perf_counter()
    for x in inputs:
        c.inputs += 1
        t0, w0 = time.process_time(), time.perf_counter()
        try: fn(x)
        except expected: pass
        except Exception as e:
            c.exceptions += 1
            if len(c.examples) < 5: c.examples.append(('exception', repr(x)[:300], ''.join(traceback.format_exception_only(e)).strip()[:500]))
        dt, dw = time.process_time() - t0, time.perf_counter() - w0
        c.max_s, c.max_wall_s = max(c.max_s, dt), max(c.max_wall_s, dw)
        if dt > limit_s or dw > limit_s * wall_factor:
            c.hangs += 1
            if len(c.examples) < 5: c.examples.append(('hang', repr(x)[:300], f'{dt:.2f} s CPU, {dw:.2f} s wall'))
    c.seconds = time.perf_counter() - t_all
    REPORT.append(c)
    return c

def rng(seed:int=0)->random.Random: return random.Random(seed)

NASTY = ['', ' ', '\x00', '\ud83d', '\ude00', '\ud83d\ude00', '😀', '温度', '\u202e', '\t', '\r\n', '\\', "'", '"', '%', '_',
         '(', ')', '[', ']', '{', '}', '^', '*', '+', '-', '/', '!', '9' * 50, '1e308', '-1e999', 'nan', 'inf', 'NOT ',
         'LIKE ', '$', '@', '..', '/etc/passwd', '~/../../x', '; id', '`id`', '$(id)']

def nasty_text(r:random.Random, max_len:int=200)->str:
    "A random string of nasty pieces and random characters (surrogates included)"
    parts = []
    while sum(map(len, parts)) < r.randint(0, max_len):
        k = r.random()
        if k < 0.5: parts.append(r.choice(NASTY))
        elif k < 0.8: parts.append(''.join(chr(r.randint(32, 126)) for _ in range(r.randint(1, 8))))
        else: parts.append(''.join(chr(r.randint(0, 0x10FFFF)) for _ in range(r.randint(1, 3))))
    return ''.join(parts)
