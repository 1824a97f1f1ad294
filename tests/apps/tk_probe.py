"""A Tk window that logs every pointer, wheel and key event it receives as JSON lines.

Used by tests/test_executor_xvfb.py to check, on a real X server, what the executor's backends really do.
The window covers the screen down to y=600; below it the bare root window is watched through python-xlib,
because Tk 8.6 does not report wheel buttons 6 and 7 (horizontal scroll).
Usage: python tk_probe.py LOGFILE WIDTH HEIGHT
"""
import json, os, sys, tempfile, threading, tkinter as tk

log = open(sys.argv[1], 'a', buffering=1)
W, H = int(sys.argv[2]), int(sys.argv[3])
lock = threading.Lock()
def put(**kw):
    with lock: log.write(json.dumps(kw, ensure_ascii=False) + '\n')

def watch_root():
    "Log button presses on the uncovered root window (y >= 600), wheel buttons 4-7 included"
    if not os.path.exists(os.environ.get('XAUTHORITY') or os.path.expanduser('~/.Xauthority')):
        os.environ['XAUTHORITY'] = tempfile.mkstemp()[1]
    from Xlib import X, display
    d = display.Display()
    root = d.screen().root
    root.change_attributes(event_mask=X.ButtonPressMask | X.ButtonReleaseMask)
    d.sync()
    put(ev='root-ready')
    while True:
        e = d.next_event()
        if e.type in (X.ButtonPress, X.ButtonRelease):
            put(ev='press' if e.type == X.ButtonPress else 'release', num=e.detail, x=e.root_x, y=e.root_y, where='root')

root = tk.Tk()
root.geometry(f'{W}x600+0+0')
entry = tk.Entry(root, font=('DejaVu Sans', 16))
entry.place(x=100, y=100, width=600, height=40)      # the text field: centre (400, 120)
canvas = tk.Canvas(root, bg='white', highlightthickness=0)
canvas.place(x=0, y=200, width=W, height=400)         # y in [200, 600)
root.bind_all('<ButtonPress>', lambda e: put(ev='press', num=e.num, x=e.x_root, y=e.y_root))
root.bind_all('<ButtonRelease>', lambda e: put(ev='release', num=e.num, x=e.x_root, y=e.y_root))
root.bind_all('<B1-Motion>', lambda e: put(ev='drag', x=e.x_root, y=e.y_root))
root.bind_all('<KeyPress>', lambda e: put(ev='key', keysym=e.keysym, ctrl=bool(e.state & 4), shift=bool(e.state & 1)))
entry.bind('<Return>', lambda e: put(ev='enter', text=entry.get()))
entry.bind('<KeyRelease>', lambda e: put(ev='text', text=entry.get()))
threading.Thread(target=watch_root, daemon=True).start()
root.after(300, lambda: put(ev='ready'))
root.mainloop()
