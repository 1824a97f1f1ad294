"""The timing loop the benchmarks share: each call of a function timed apart, with the clock the benchmarks read
(`time.perf_counter`). `python bench/X.py` puts bench/ on the path, so a benchmark imports it as `from timing import timed`."""
import time

def timed(fn,      # called as fn(i), i = 0 .. n-1
          n:int=1, # how many calls
         )->list:  # the seconds of each call, in order
    "Seconds of each of `n` calls of `fn(i)`"
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out
