"""Attacks on coda's own server (issue 36, item 1): nothing a request or a web page sends makes `coda serve-local` (or the
pipeline's `LocalServer`) run code. Each reproducer of the issue is a test here: the admin routes on by default, a spec
naming `os.system`, a body that is not JSON (a browser's no-cors fetch or form), another Host, a huge or endless body.
Then a headless Chromium (Debian's, driven by Playwright) opens attack pages from a file:// URL and from another local
origin, and a fuzz sends random methods, paths, hosts, content types, tokens, bodies and lengths, printing its counts."""
import json, os, re, shutil, socket, subprocess, sys, threading, time
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from functools import partial
from pathlib import Path
from urllib.parse import quote
import httpx, psutil, pytest
from fuzz import fuzz, nasty_text, rng
from needs import need_programs
from coda.procs import free_port
from coda.serve import LocalServer

HERE = Path(__file__).parent
ENV = {'PYTHONPATH': str(HERE)}   # the server imports serve_fixtures
ECHO = {'backend': 'serve_fixtures:Echo'}
CHAT = {'model': 'echo', 'messages': [{'role': 'user', 'content': 'Open the File menu.'}]}
MiB = 1 << 20

def pwn(marker:Path, name:str='pwned', backend:str='os.system')->dict:
    "The issue's admin request: a spec whose backend, called with its args, writes `marker`"
    return {'name': name, 'spec': {'backend': backend, 'args': {'command': f'id > {marker}'}}, 'load': True}

def wait_healthy(base:str, proc:subprocess.Popen, log:Path, timeout:float=120):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None: raise RuntimeError(f"the server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(base + '/health', timeout=2).status_code == 200: return
        except httpx.HTTPError: pass
        time.sleep(0.1)
    raise TimeoutError(f"no /health at {base}:\n{log.read_text()[-3000:]}")

@dataclass
class Plain:
    "`coda serve-local` started as its README line starts it: no flags but a model"
    port: int
    proc: subprocess.Popen
    log: Path
    @property
    def base(self)->str: return f'http://127.0.0.1:{self.port}'

@pytest.fixture(scope='module')
def plain(tmp_path_factory):
    port, log = free_port(), tmp_path_factory.mktemp('plain')/'server.log'
    with open(log, 'wb') as out:
        proc = subprocess.Popen([sys.executable, '-m', 'coda', 'serve-local', '--port', str(port), '--model', 'echo=' + json.dumps(ECHO)],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, 'PYTHONPATH': os.pathsep.join(filter(None, (
                                    os.environ.get('PYTHONPATH'), str(HERE))))})
    try:
        wait_healthy(f'http://127.0.0.1:{port}', proc, log)
        yield Plain(port, proc, log)
    finally:
        proc.terminate()
        proc.wait(20)

@pytest.fixture(scope='module')
def srv(tmp_path_factory):
    "The pipeline's kind of server: a `LocalServer`, admin routes on behind its token"
    with LocalServer({'echo': ECHO}, env=ENV, log=tmp_path_factory.mktemp('srv')/'server.log') as s: yield s

def bearer(token)->dict: return {'Authorization': f'Bearer {token}'}

# ------------------------------------------------------------------ the reproducers

def test_admin_routes_are_off_by_default(plain, tmp_path):
    "The issue's first reproducer, as sent: `coda serve-local` registered and loaded os.system from any local program"
    marker = tmp_path/'pwned'
    r = httpx.post(plain.base + '/coda/models', json=pwn(marker), timeout=30)
    assert r.status_code == 404 and r.json()['error']['code'] == 404, r.text
    assert not marker.exists()
    assert httpx.get(plain.base + '/coda/models').status_code == 404
    assert httpx.post(plain.base + '/v1/chat/completions', json=CHAT, timeout=30).status_code == 200   # the chat route serves on

def test_os_system_is_refused_even_with_the_token(srv, tmp_path):
    marker = tmp_path/'pwned'
    for backend in ('os.system', 'os:system', 'subprocess:getoutput', 'builtins:exec', 'posix.system'):
        r = httpx.post(srv.base + '/coda/models', json=pwn(marker, backend=backend), headers=bearer(srv.token), timeout=30)
        assert r.status_code == 403, (backend, r.status_code, r.text)
        assert f"backend {backend!r} is not allowed" in r.json()['error']['message'] and 'coda.mini.grounder:A11yGrounder' in r.text
    as_codec = {'name': 'pwned', 'spec': {'path': str(tmp_path), 'codec': 'os.system'}, 'load': True}
    r = httpx.post(srv.base + '/coda/models', json=as_codec, headers=bearer(srv.token), timeout=30)
    assert r.status_code == 403 and "codec 'os.system' is not allowed" in r.text
    with pytest.raises(RuntimeError, match="HTTP 403: backend 'os.system' is not allowed"): srv.register('pwned', pwn(marker)['spec'], load=True)
    assert not marker.exists() and srv.models() == {'echo': ECHO}

def test_an_allowed_backend_registers_with_the_token(srv):
    "The refusals above are the allowlist's, not a broken route: the project's own grounder registers and answers"
    srv.register('grounder', {'backend': 'coda.mini.grounder:A11yGrounder'}, load=True)
    assert srv.models()['grounder'] == {'backend': 'coda.mini.grounder:A11yGrounder'}
    srv.unregister('grounder')
    assert srv.models() == {'echo': ECHO}

def test_admin_routes_need_the_token(srv, tmp_path):
    marker = tmp_path/'pwned'
    spec = {'name': 'grounder', 'spec': {'backend': 'coda.mini.grounder:A11yGrounder'}}
    for headers, status in (({}, 401), ({'Authorization': 'Bearer'}, 401), ({'Authorization': f'Basic {srv.token}'}, 401),
                            (bearer('x' * 43), 403), (bearer(srv.token[:-1]), 403), (bearer(srv.token + 'x'), 403)):
        for method, path, kw in (('POST', '/coda/models', dict(json=spec)), ('POST', '/coda/models', dict(json=pwn(marker))),
                                 ('GET', '/coda/models', {}), ('DELETE', '/coda/models/echo', {})):
            r = httpx.request(method, srv.base + path, headers=headers, timeout=30, **kw)
            assert r.status_code == status, (headers, method, path, r.status_code, r.text)
            assert set(r.json()['error']) == {'message', 'type', 'code'}
            if status == 401: assert r.headers['www-authenticate'] == 'Bearer'
    assert not marker.exists() and srv.models() == {'echo': ECHO}

@pytest.mark.parametrize('server', ['plain', 'srv'])
def test_bodies_that_are_not_json_are_refused(server, request, tmp_path):
    "What a page may send without a CORS preflight (text/plain, a form, multipart) and a body with no type: 415, on every route"
    s = request.getfixturevalue(server)
    base, marker = s.base, tmp_path/'pwned'
    token = bearer(getattr(s, 'token', None) or 'none')
    for path, body in (('/v1/chat/completions', CHAT), ('/coda/models', pwn(marker))):
        text = json.dumps(body)
        for kw in (dict(content=text, headers={'Content-Type': 'text/plain;charset=UTF-8'}), dict(content=text),
                   dict(data={'x': text}), dict(files={'x': ('x.json', text, 'application/json')}),
                   dict(content=text, headers={'Content-Type': 'application/jsonx'}), dict(content=text, headers={'Content-Type': 'text/json'})):
            r = httpx.post(base + path, timeout=30, **{**kw, 'headers': {**token, **kw.get('headers', {})}})
            assert r.status_code == 415, (path, kw, r.status_code, r.text)
            assert 'Content-Type: application/json' in r.json()['error']['message']
    assert not marker.exists()
    r = httpx.post(base + '/v1/chat/completions', content=json.dumps(CHAT), headers={'Content-Type': 'Application/JSON; charset=utf-8'}, timeout=30)
    assert r.status_code == 200, r.text   # the media type is case-insensitive and may carry parameters

@pytest.mark.parametrize('server', ['plain', 'srv'])
def test_another_host_is_refused(server, request, tmp_path):
    "DNS rebinding: a page on a name that resolves to 127.0.0.1 sends its own name as Host"
    s = request.getfixturevalue(server)
    port = s.port
    for host in ('evil.example', f'evil.example:{port}', '127.0.0.1', f'127.0.0.1:{port + 1}', f'localhost.evil.example:{port}', f'0.0.0.0:{port}'):
        r = httpx.post(s.base + '/v1/chat/completions', json=CHAT, headers={'Host': host}, timeout=30)
        assert r.status_code == 421, (host, r.status_code, r.text)
        assert 'does not answer for Host' in r.json()['error']['message']
    for host in (f'127.0.0.1:{port}', f'localhost:{port}', f'LOCALHOST:{port}'):
        assert httpx.post(s.base + '/v1/chat/completions', json=CHAT, headers={'Host': host}, timeout=30).status_code == 200, host

def test_a_page_origin_is_refused(srv):
    "Browsers send Origin with every cross-origin POST (`null` from a file); programs send none"
    for origin in ('null', 'http://127.0.0.1:1', 'http://evil.example', f'http://localhost.evil.example:{srv.port}'):
        r = httpx.post(srv.base + '/v1/chat/completions', json=CHAT, headers={'Origin': origin}, timeout=30)
        assert r.status_code == 403 and 'web page' in r.json()['error']['message'], (origin, r.text)
    assert httpx.post(srv.base + '/v1/chat/completions', json=CHAT, headers={'Origin': srv.base}, timeout=30).status_code == 200

def rss(pid:int)->int: return psutil.Process(pid).memory_info().rss

def raw_request(port:int, head:str, body_chunks, timeout:float=60)->tuple:
    "Send `head` and then `body_chunks` (an iterable of bytes) on one connection while reading the answer: (status, bytes sent)"
    got, sent = bytearray(), 0
    with socket.create_connection(('127.0.0.1', port), timeout=timeout) as s:
        def read():
            try:
                while (b := s.recv(65536)): got.extend(b)
            except OSError: pass
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            s.sendall(head.encode())
            for chunk in body_chunks:
                if got: break    # answered: stop sending
                s.sendall(chunk)
                sent += len(chunk)
        except OSError: pass     # the server closed the connection: what it answered was read meanwhile
        reader.join(timeout)
    m = re.match(rb'HTTP/1\.[01] (\d{3}) ', bytes(got))
    return (int(m[1]) if m else None), sent

def test_a_huge_content_length_is_413_before_the_body_is_read(plain):
    "The issue's second reproducer: a 1 GiB body took serve-local to 5.7 GiB; now the header alone is answered"
    head = (f'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{plain.port}\r\nContent-Type: application/json\r\n'
            f'Content-Length: {1 << 30}\r\n\r\n')
    before = rss(plain.proc.pid)
    status, sent = raw_request(plain.port, head, (b' ' * MiB for _ in range(1024)))
    assert status == 413, status
    assert sent < 256 * MiB, sent   # answered long before the gigabyte was sent (the kernel's buffers take a few MiB)
    assert rss(plain.proc.pid) - before < 32 * MiB, (before, rss(plain.proc.pid))
    assert httpx.post(plain.base + '/v1/chat/completions', json=CHAT, timeout=30).status_code == 200   # and it serves on

def chunked(total:int, size:int=MiB):
    "A chunked body of `total` bytes of spaces, in `size` pieces, then its end"
    for _ in range(total // size): yield b'%x\r\n%s\r\n' % (size, b' ' * size)
    yield b'0\r\n\r\n'

def test_an_oversized_chunked_body_is_413(plain):
    "No Content-Length: the body is counted as it arrives and refused once it passes the limit (68 MiB by default)"
    head = f'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{plain.port}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n'
    status, sent = raw_request(plain.port, head, chunked(1024 * MiB))
    assert status == 413 and sent < 512 * MiB, (status, sent)
    assert raw_request(plain.port, head, [b'%x\r\n%s\r\n0\r\n\r\n' % (len(json.dumps(CHAT)), json.dumps(CHAT).encode())])[0] == 200

# ------------------------------------------------------------------ web pages in a real browser

ATTACK = """<!doctype html><html><body><iframe name="sink"></iframe><script>
const BASE = %(base)s, MARKER = %(marker)s;
const pwn = JSON.stringify({name: 'pwned', spec: {backend: 'os.system', args: {command: 'id > ' + MARKER}}, load: true});
const chat = JSON.stringify({model: 'echo', messages: [{role: 'user', content: 'hi'}]});
function tries() {
  const out = [];
  for (const [path, body, method] of [['/coda/models', pwn, 'POST'], ['/v1/chat/completions', chat, 'POST'], ['/coda/models/echo', null, 'DELETE']]) {
    const url = BASE + path;
    out.push(fetch(url, {method, mode: 'no-cors', body}));                                            // text/plain
    out.push(fetch(url, {method, mode: 'no-cors', body: new URLSearchParams({x: body})}));             // a form's encoding
    const fd = new FormData(); fd.append('x', body); out.push(fetch(url, {method, mode: 'no-cors', body: fd}));   // multipart
    out.push(fetch(url, {method, mode: 'no-cors', body: new Blob([body || ''], {type: 'application/json'})}));
    out.push(fetch(url, {method, mode: 'cors', headers: {'Content-Type': 'application/json'}, body}));   // needs a preflight
    out.push(fetch(url, {method, mode: 'cors', headers: {'Content-Type': 'application/json', 'Authorization': 'Bearer guess'}, body}));
    out.push(fetch(url, {method, mode: 'no-cors', credentials: 'include', body, keepalive: true}));
    if (method === 'POST') navigator.sendBeacon(url, body);
  }
  return Promise.allSettled(out).then(rs => rs.map(r => r.status + ':' + (r.value ? r.value.type : String(r.reason).slice(0, 60))));
}
function form(path, enctype) {   // a form POST, its answer in the iframe; text/plain lets a field's name carry JSON
  return new Promise(done => {
    const f = document.createElement('form'), i = document.createElement('input');
    f.method = 'POST'; f.action = BASE + path; f.enctype = enctype; f.target = 'sink';
    i.name = pwn.slice(0, -1) + ', "x": "'; i.value = '"}'; f.appendChild(i); document.body.appendChild(f);
    document.querySelector('iframe').onload = () => done(path + ' ' + enctype); f.submit();
    setTimeout(() => done(path + ' ' + enctype + ' (no load event)'), 5000);
  });
}
</script></body></html>"""

@pytest.fixture(scope='module')
def browser():
    "Debian's Chromium, headless, driven by Playwright (no downloaded browser), as tests/test_viewer.py starts it"
    sync_api = pytest.importorskip('playwright.sync_api', reason='playwright is not installed (pip install -e .[dev])')
    need_programs('chromium')
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=shutil.which('chromium'), args=['--no-sandbox'])
        yield b
        b.close()

@pytest.fixture
def other_origin(tmp_path):
    "A second local web server, on another port: the page's origin is http://127.0.0.1:OTHER"
    httpd = ThreadingHTTPServer(('127.0.0.1', 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path)))
    httpd.RequestHandlerClass.log_message = lambda *a: None
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f'http://127.0.0.1:{httpd.server_address[1]}'
    httpd.shutdown()
    httpd.server_close()

def refusals(log:Path)->int:
    "How many requests the server's log says it refused"
    return len(re.findall(r'^refused ', log.read_text(errors='replace'), re.M)) if log.exists() else 0

def attack_page(browser, url:str)->list:
    "Open the attack page at `url`, run every fetch and both form POSTs against the server; what the page saw"
    pg = browser.new_page()
    try:
        pg.goto(url)
        seen = pg.evaluate('tries()')
        seen += [pg.evaluate(f'form({p!r}, {e!r})') for p in ('/coda/models', '/v1/chat/completions') for e in ('text/plain', 'application/x-www-form-urlencoded')]
        pg.wait_for_timeout(500)   # sendBeacon is sent in the background
        return seen
    finally: pg.close()

@pytest.mark.parametrize('where', ['file', 'other-origin'])
def test_web_pages_cannot_make_the_server_run_anything(browser, srv, tmp_path, other_origin, where):
    marker = tmp_path/'pwned'
    (tmp_path/'attack.html').write_text(ATTACK % dict(base=json.dumps(srv.base), marker=json.dumps(str(marker))))
    url = (tmp_path/'attack.html').as_uri() if where == 'file' else other_origin + '/attack.html'
    before = refusals(srv.logfile)
    seen = attack_page(browser, url)
    assert len(seen) == 3 * 7 + 4 and all(s.startswith(('fulfilled:', 'rejected:')) or s.startswith('/') for s in seen), seen
    assert any(s.startswith('fulfilled:opaque') for s in seen), seen   # the no-cors requests were sent and answered
    time.sleep(0.5)
    assert not marker.exists()
    assert srv.models() == {'echo': ECHO}      # nothing registered, echo not deleted
    assert refusals(srv.logfile) - before >= 12, srv.logfile.read_text()[-3000:]   # the requests reached the server, which refused them

# ------------------------------------------------------------------ fuzz

def q(text:str)->str: return quote(text.encode('utf-8', 'surrogatepass'), safe='')   # a path segment, any text

def fuzz_request(r, port:int, token:str, marker:Path)->tuple:
    "One random request as raw bytes, and whether it declares more body than it sends: a well-formed request to one route, some parts replaced"
    chat = {**CHAT, 'model': r.choice(['echo', 'nope', nasty_text(r, 10)]), 'temperature': r.choice([0.5, 'hot', None, -1, 1e308]),
            'messages': r.choice([CHAT['messages'], [], [{'role': 'user', 'content': nasty_text(r)}], 'x', [{'role': 1}],
                                  [{'role': 'user', 'content': [{'type': 'image_url', 'image_url': {'url': 'data:image/png;base64,' + nasty_text(r, 30)}}]}]])}
    spec = r.choice([pwn(marker)['spec'], pwn(marker, backend='subprocess:getoutput')['spec'], {'path': str(marker.parent), 'codec': 'os.system'},
                     {'backend': 'posix:system', 'args': {'command': f'id > {marker}'}}, {'backend': 'coda.mini.grounder.A11yGrounder', 'codec': 'os:system'},
                     {'backend': 'coda.mini.grounder:A11yGrounder', 'args': {'screen': [r.randint(-5, 5000), 2]}}, {'backend': {'x': 1}}, 'no/such', None])
    add = {'name': r.choice(['x', '', nasty_text(r, 10), 1]), 'spec': spec, 'load': r.choice([True, True, False, 'yes'])}
    method, path, obj, auth = r.choice([('POST', '/v1/chat/completions', chat, None), ('POST', '/coda/models', add, f'Bearer {token}'),
                                        ('POST', '/coda/models', add, f'Bearer {token}'), ('GET', '/coda/models', None, f'Bearer {token}'),
                                        ('DELETE', '/coda/models/' + r.choice(['echo', 'x', q(nasty_text(r, 20))]), None, f'Bearer {token}'),
                                        ('GET', r.choice(['/health', '/v1/models']), None, None)])
    host, ctype, origin, length = f'127.0.0.1:{port}', 'application/json', None, 'exact'
    body = b'' if obj is None else json.dumps(obj).encode()
    swap = lambda: r.random() < 0.2   # each part is replaced by a random one one time in five
    if swap(): method = r.choice(['GET', 'POST', 'DELETE', 'PUT', 'PATCH', 'OPTIONS', 'HEAD', 'PROPFIND'])
    if swap(): path = r.choice(['/coda/models', '/coda/models/..%2f..', '//coda/models', '/' + q(nasty_text(r, 30)), '/v1/chat/completions/'])
    if swap(): host = r.choice([f'localhost:{port}', 'evil.example', f'evil.example:{port}', '127.0.0.1', None, '',
                                nasty_text(r, 20).encode('latin-1', 'replace').decode('latin-1')])
    if swap(): ctype = r.choice(['application/json; charset=utf-8', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x',
                                 'application/jsonx', None, nasty_text(r, 20)])
    if swap(): auth = r.choice([None, 'Bearer wrong', 'Basic eA==', 'Bearer ' + nasty_text(r, 40), f'Bearer {token}'])
    if swap(): origin = r.choice(['null', 'http://evil.example', f'http://127.0.0.1:{port}'])
    if swap(): body = r.choice([json.dumps(obj, ensure_ascii=False), '[' * r.choice([10, 1000, 100000]), nasty_text(r, 400), '{"model": NaN}', '',
                                '{"model": "echo", "messages": [{"role": "user", "content": "\\ud800"}]}', '1' * 5000]).encode('utf-8', 'surrogatepass')
    if swap(): body = bytes(r.getrandbits(8) for _ in range(r.randint(0, 300)))
    if swap(): length = r.choice(['none', 'chunked', 'short', 'long', 'junk', 'huge'])
    head = [f'{method} {path} HTTP/1.1'] + [f'{k}: {v}' for k, v in (('Host', host), ('Content-Type', ctype), ('Authorization', auth), ('Origin', origin))
                                            if v is not None]
    if length == 'chunked': head.append('Transfer-Encoding: chunked')
    elif length != 'none': head.append('Content-Length: ' + {'exact': str(len(body)), 'short': str(max(0, len(body) - 3)), 'long': str(len(body) + 10),
                                                            'junk': r.choice(['-1', 'abc', '1e3', f' {len(body)} ', '٣']), 'huge': str(1 << 40)}[length])
    wire = '\r\n'.join(head).encode('latin-1', 'replace') + b'\r\n\r\n' + (b'%x\r\n%s\r\n0\r\n\r\n' % (len(body), body) if length == 'chunked' and body
                                                                        else b'0\r\n\r\n' if length == 'chunked' else body)
    return wire, length == 'long'   # a body longer than sent: the server waits for the rest until the client goes

def send_raw(port:int, wire:bytes, waits:bool, timeout:float=20)->tuple:
    "Send `wire` on a new connection: the first answer's status (None when the server closed without one) and its error message"
    got = bytearray()
    with socket.create_connection(('127.0.0.1', port), timeout=timeout) as s:
        try: s.sendall(wire)
        except OSError: pass
        if waits: s.shutdown(socket.SHUT_WR)   # the rest of the body never comes
        try:
            while not (m := re.match(rb'HTTP/1\.[01] (\d{3}) .*?\r\n\r\n', bytes(got), re.S)) or not wire.startswith(b'HEAD ') and len(got) - m.end() < int(
                    (re.search(rb'(?im)^content-length: *(\d+)', m[0]) or [0, b'0'])[1]):   # its headers, and its body unless it answers a HEAD
                if not (b := s.recv(65536)): break
                got.extend(b)
        except ConnectionResetError: pass
    if not (m := re.match(rb'HTTP/1\.[01] (\d{3}) .*?\r\n\r\n', bytes(got), re.S)): return None, ''
    try: return int(m[1]), json.loads(got[m.end():])['error']['message']
    except (ValueError, KeyError, TypeError): return int(m[1]), ''

def test_fuzz_the_routes(tmp_path):
    """Random requests at a running LocalServer: never an error of the server's own (a 500 other than a spec sent with `load: true` that does
    not load), never a hang, never the marker"""
    marker = tmp_path/'pwned'
    with LocalServer({'echo': ECHO}, env=ENV, log=tmp_path/'server.log') as s:
        r, statuses, found, load_failures, not_allowed = rng(36), {}, [], [0], [0]
        def one(case):
            wire, waits = case
            status, message = send_raw(s.port, wire, waits)
            statuses[status] = statuses.get(status, 0) + 1
            not_allowed[0] += status == 403 and 'is not allowed on this server' in message
            if marker.exists():
                found.append(wire[:300])
                marker.unlink()
                raise AssertionError(f"the marker was written by {wire[:300]!r}")
            if status == 500 and wire.startswith(b'POST /coda/models ') and message.startswith('could not load model'): load_failures[0] += 1
            elif status is not None and status >= 500: raise AssertionError(f"HTTP {status} ({message}) for {wire[:300]!r}")
            if status is None and not waits and b'\r\n\r\n' in wire: raise AssertionError(f"no answer to {wire[:300]!r}")
        c = fuzz('coda.serve routes (raw HTTP)', (fuzz_request(r, s.port, s.token, marker) for _ in range(3000)), one, limit_s=1.0)
        alive = s.alive and httpx.get(s.base + '/health', timeout=30).status_code == 200
        registered = s.models()   # what the requests that held the token registered: allowed backends only
    counts = c
    counts.markers = len(found)
    print(counts.line(), dict(sorted(statuses.items(), key=str)), f"{not_allowed[0]} refused by the allowlist, {load_failures[0]} specs that did not load")
    counts.assert_clean()
    assert counts.markers == 0 and alive
    assert all(spec.get('backend') in ('serve_fixtures:Echo', 'coda.mini.grounder:A11yGrounder') and not spec.get('codec')
               for spec in registered.values()), registered
    assert {200, 400, 401, 403, 404, 413, 415, 421} <= set(statuses) and not_allowed[0] >= 20, statuses   # the fuzz reached every kind of answer
