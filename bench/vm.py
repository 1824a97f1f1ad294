"""The VM environment's step time against ScienceBoard's real in-VM server on this machine (`coda.envs.vmclient.LocalVM`:
server.py unchanged in a private Xvfb, Debian's KAlgebra standing in for ScienceBoard's fork), and where it goes.

A step of `VMEnv` is: the actions sent as one rendered pyautogui program (`POST /setup/execute`, which starts
`python3 -c` in the VM), the settle pause (ScienceBoard's 1 s; `--settle`), the screenshot (`GET /screenshot`: the
server's pyautogui/scrot grab, its pointer pasted in, a PNG written and sent) and, with `--a11y`, the accessibility
tree (`GET /accessibility`: an AT-SPI walk of every app). Each part is timed apart over `--steps` clicks on KAlgebra's
window (task D-03 set up first), then whole `VMEnv.step` calls are timed, and the set-up (`reset`: the local VM
restarted, KAlgebra launched, the task's 2.5 s `wait`). Against a real VM add the network's round trips (4 per step).

Usage: python bench/vm.py [--steps 20] [--settle 0] [--a11y]
"""
import io, statistics, time
from PIL import Image
from fastcore.script import call_parse
from coda.actions import Action
from coda.paths import SHARED
from coda.tasks import load_task
from coda.envs.vm import VMEnv
from coda.envs.vmclient import parse_accessibility
from coda.procs import free_port
from timing import timed

def ms(xs): return f"{statistics.median(xs) * 1000:7.1f} ms (median of {len(xs)}; min {min(xs) * 1000:.1f}, max {max(xs) * 1000:.1f})"

@call_parse
def main(steps:int=20,     # clicks timed per part
         settle:float=0.0, # the pause after each step (VMEnv's default is ScienceBoard's 1.0 s)
         a11y:bool=False): # read the accessibility tree in whole steps too
    "Print the VM environment's step time and its parts"
    port = free_port()
    kal = f'LD_LIBRARY_PATH=/home/user/6.5.0/gcc_64/lib =>;/app/bin/kalgebra {port}=>kalgebra'
    task = load_task(SHARED/'data'/'scienceboard'/'tasks'/'KAlgebra'/'D-03.json')
    t = time.perf_counter()
    env = VMEnv(provider='local', rewrite=kal, port=port, settle=settle, item_pause=0, a11y=a11y, setup_tries=1)
    start = time.perf_counter() - t
    try:
        resets = timed(lambda i: env.reset(task), 3)
        time.sleep(2)
        png = env.client.screenshot()
        click = lambda i: env.client.run_actions([Action('click', 300 + 10 * (i % 20), 400)])
        parts = {'actions (POST /setup/execute, python3 -c pyautogui)': timed(click, steps),
                 'screenshot (GET /screenshot)': timed(lambda i: env.client.screenshot(), steps),
                 'accessibility tree (GET /accessibility + parse)': timed(lambda i: parse_accessibility(env.client.accessibility()), steps),
                 'decode the PNG (PIL; only when someone reads pixels)': timed(lambda i: Image.open(io.BytesIO(png)).load(), steps)}
        whole = timed(lambda i: env.step([Action('click', 300 + 10 * (i % 20), 400)]), steps)
    finally: env.close()
    print(f"VMEnv against ScienceBoard's server in a local Xvfb (1280x800), KAlgebra D-03; settle {settle} s, a11y {a11y}")
    print(f"  start (LocalVM up):  {start * 1000:7.1f} ms")
    print(f"  reset (revert + set-up, incl. the task's 2.5 s wait): {ms(resets)}")
    for k, v in parts.items(): print(f"  {k:55s} {ms(v)}")
    print(f"  whole step (actions + settle + observe{' + a11y' if a11y else ''}): {ms(whole)}")
