"""A small fuzz harness shared by the fuzz tests: feed seeded random inputs to a function, count the inputs, the
exceptions it raised and the inputs it took too long on (hangs), and report the counts at the end of the pytest run
(printed even under `-q`, so CI logs carry them)."""
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
    hangs: int = 0                    # inputs that took longer than the limit
    max_s: float = 0.0                # the slowest input's seconds
    seconds: float = 0.0              # all inputs together
    examples: list = field(default_factory=list)  # the first few failures: (kind, input repr, detail)
    def line(self)->str:
        return (f"{self.name}: {self.inputs} inputs, {self.exceptions} exceptions, {self.hangs} hangs "
                f"(slowest {self.max_s:.3f} s, all {self.seconds:.1f} s)")
    def assert_clean(self):
        assert self.exceptions == 0 and self.hangs == 0, self.line() + '\n' + '\n'.join(map(str, self.examples))

def fuzz(name:str,                 # the target's name in the report
         inputs:Iterable,          # the inputs (a generator is fine)
         fn:Callable,              # called with each input; raising counts as an exception
         limit_s:float=1.0,        # an input taking longer than this counts as a hang
         expected:tuple=(),        # exception types that are the target's documented rejections, not failures
        )->FuzzCounts:
    "Run `fn` on every input, counting exceptions and hangs"
    c = FuzzCounts(name)
    t_all = time.perf_counter()
    for x in inputs:
        c.inputs += 1
        t0 = time.perf_counter()
        try: fn(x)
        except expected: pass
        except Exception as e:
            c.exceptions += 1
            if len(c.examples) < 5: c.examples.append(('exception', repr(x)[:300], ''.join(traceback.format_exception_only(e)).strip()[:500]))
        dt = time.perf_counter() - t0
        c.max_s = max(c.max_s, dt)
        if dt > limit_s:
            c.hangs += 1
            if len(c.examples) < 5: c.examples.append(('hang', repr(x)[:300], f'{dt:.2f} s'))
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
