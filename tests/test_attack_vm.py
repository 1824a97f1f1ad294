"""The VM client against a hostile in-VM server: whatever a server (or something posing as one) answers, every call
of `VMClient` returns a checked value or raises `VMError`, within its deadline; the environment built on it then
ends the episode as an error, never with a raw exception or a hang. Counts print in the fuzz report."""
import json, random, socket, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import pytest
from fuzz import fuzz, rng
from coda.envs.vmclient import VMClient, VMError, MAX_SIDE
from coda.envs.core import PNG_SIGNATURE

def png_header(w:int, h:int)->bytes: return PNG_SIGNATURE + b'\x00\x00\x00\x0dIHDR' + w.to_bytes(4, 'big') + h.to_bytes(4, 'big') + b'\x08\x02\x00\x00\x00'

def hostile_reply(r:random.Random)->tuple:
    "(status, headers, body, trickle seconds per byte) a hostile server might send"
    bodies = [b'', b'null', b'[]', b'{}', b'"x"', b'1e999', b'{"width": 1e999, "height": 2}', b'{"width": true, "height": 800}',
              b'{"width": -1, "height": 800}', b'{"width": 1280.5, "height": 800}', b'{"width": "1280", "height": "800"}',
              b'{"width": 99999999, "height": 99999999}', b'{"width": 65536, "height": 65536}', b'[' * 100_000,
              b'{"AT": 5}', b'{"AT": "<a"}', b'{"status": "success", "output": 5, "error": [], "returncode": "0"}',
              b'{"status": "success", "output": "", "error": "", "returncode": 1e999}', b'{"status": "error"}',
              png_header(10**6, 10**6), png_header(0, 0), PNG_SIGNATURE, b'GIF89a', bytes(r.randrange(256) for _ in range(r.randint(0, 300))),
              json.dumps({'log messages': {'note': [1, None]}, 'error': {'type': 5}}).encode(), b'\xff\xfe\x00\x00']
    status = r.choice([200, 200, 200, 201, 204, 301, 400, 404, 500, 503, 999])
    headers = r.choice([{}, {'Content-Length': '10'}, {'Content-Length': str(10**12)}, {'Content-Type': 'application/json'},
                        {'Transfer-Encoding': 'chunked'}, {'Content-Encoding': 'gzip'}])
    body = r.choice(bodies)
    return status, headers, body, (0.05 if len(body) < 500 and r.random() < 0.1 else 0)

class Hostile(BaseHTTPRequestHandler):
    "Answers every request with the server's current `reply`"
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def _go(self):
        n = int(self.headers.get('Content-Length') or 0)
        if n: self.rfile.read(n)
        status, headers, body, trickle = self.server.reply
        try:
            self.wfile.write(f'HTTP/1.1 {status} X\r\n'.encode())
            for k, v in headers.items(): self.wfile.write(f'{k}: {v}\r\n'.encode())
            if 'Content-Length' not in headers and 'Transfer-Encoding' not in headers: self.wfile.write(f'Content-Length: {len(body)}\r\n'.encode())
            self.wfile.write(b'\r\n')
            for i in range(0, len(body), 1 if trickle else len(body) or 1):
                self.wfile.write(body[i:i + (1 if trickle else len(body))])
                if trickle: time.sleep(trickle)
            self.close_connection = True
        except OSError: pass
    do_GET = do_POST = _go

@pytest.fixture
def hostile():
    srv = ThreadingHTTPServer(('127.0.0.1', 0), Hostile)
    srv.daemon_threads = True
    srv.reply = (200, {}, b'', 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()

CALLS = [lambda c: c.screenshot(), lambda c: c.accessibility(), lambda c: c.screen_size(), lambda c: c.execute(['ls'], timeout=1),
         lambda c: c.read('/home/user/x'), lambda c: c.launch(['true']), lambda c: c.opt(6), lambda c: c.chimerax('info', timeout=1),
         lambda c: c.file('/home/user/x'), lambda c: c.run_actions([])]

def test_fuzz_vm_client_against_a_hostile_server(hostile):
    "300 hostile replies across the client's calls: a checked value or VMError each, none taking more than its deadline allows"
    r = rng(36)
    c = VMClient(f'http://127.0.0.1:{hostile.server_address[1]}', timeout=1, retries=1, backoff=0.01)
    def one(x):
        hostile.reply, call = x
        out = call(c)
        if isinstance(out, tuple): assert all(isinstance(v, int) and 1 <= v <= MAX_SIDE for v in out), out
    inputs = ((hostile_reply(r), r.choice(CALLS)) for _ in range(300))
    # a call may wait for its deadline (1 s per try, 2 tries, 5 s for the liveness check of a POST): 8 s of wall time, little CPU
    fuzz('VM client against a hostile server', inputs, one, limit_s=8.0, expected=(VMError,)).assert_clean()
    c.close()

def test_trickling_server_cannot_hold_a_request(hostile):
    "One byte every 0.1 s of a 5,000-byte body: the request ends at its deadline, not after 500 s"
    hostile.reply = (200, {'Content-Type': 'application/json'}, b'{"AT": "' + b'a' * 5000 + b'"}', 0.1)
    c = VMClient(f'http://127.0.0.1:{hostile.server_address[1]}', timeout=1, retries=0)
    t0 = time.monotonic()
    with pytest.raises(VMError, match='no answer within 1 s'): c.accessibility()
    assert time.monotonic() - t0 < 10
