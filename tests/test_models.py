"""coda.models against real servers: a real `transformers serve` over a tiny Qwen2.5-VL built offline (text, image,
token counts, what it does with a final assistant turn), `LocalChat` on the same model (images, continuation,
sampling), and a scripted HTTP server on 127.0.0.1 for every failure the client must survive or report
(dropped connections, 5xx, 429, malformed JSON, 4xx, hangs) and for its concurrency limit.

Replies of the random model are noise: the tests assert on shapes, token counts and protocol, never on the text."""
import asyncio, base64, io, json, os, re, socket, threading, time
from http.server import BaseHTTPRequestHandler
import pytest
from PIL import Image
from coda.config import get_settings
from coda.models import (LocalChat, ModelError, OpenAIChat, Reply, ChatBackend, image_part,
                         preflight, preflight_sync, serve_transformers, to_openai_messages)
from coda.tiny import build_tiny_qwen25vl
from agent_fixtures import ScriptedServer, Server, send_once

from agent_fixtures import IMG_TOKENS, SHOT, TEXT, IMAGE, PREFIX, CONT   # the chat requests both model tests send

# ------------------------------------------------------------------ a scripted server for failures

OK = {'id': 'c1', 'object': 'chat.completion', 'created': 0, 'model': 'm',
      'choices': [{'index': 0, 'message': {'role': 'assistant', 'content': 'click(x=1, y=2)'}, 'finish_reason': 'stop'}],
      'usage': {'prompt_tokens': 12, 'completion_tokens': 5, 'total_tokens': 17}}

def completion(content, **over)->dict:
    "A chat.completion body like OK with another content (and other top-level fields)"
    return {**OK, 'choices': [{**OK['choices'][0], 'message': {'role': 'assistant', 'content': content}}], **over}

class Scripted:
    """A real HTTP server on 127.0.0.1; request i gets `script[i]` (the last repeats): 'ok', an int status,
    'drop' (close without answering), 'hang' (never answer), 'malformed' (200, cut JSON), 'nochoices' (200, JSON
    that is not a completion), ('sleep', s) (answer after s seconds), ('retry-after', s) (429 with Retry-After),
    'empty' / 'null' (a completion with '' / null content), ('raw', bytes) (200 with that body), ('chunked', n)
    (200 with n bytes and no Content-Length)"""
    def __init__(self, *script):
        self.script, self.bodies, self.headers, self.times = script, [], [], []
        self.inflight = self.max_inflight = 0
        self.lock, self.stop = threading.Lock(), threading.Event()
        srv = self
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a): pass
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
                with srv.lock:
                    srv.bodies.append(body); srv.headers.append(dict(self.headers)); srv.times.append(time.monotonic())
                    act = srv.script[min(len(srv.bodies), len(srv.script)) - 1]
                    srv.inflight += 1; srv.max_inflight = max(srv.max_inflight, srv.inflight)
                self.counted = True
                try: self.act(act)
                finally: self.answered()
            def answered(self):
                "No longer in flight: called as the answer is written (the client may send its next request at once)"
                if getattr(self, 'counted', False):
                    with srv.lock: srv.inflight -= 1
                    self.counted = False
            def act(self, act):
                if act == 'drop': return
                if act == 'hang': srv.stop.wait(10); return
                if isinstance(act, tuple) and act[0] == 'sleep': time.sleep(act[1]); act = 'ok'
                hdr = {}
                if isinstance(act, tuple) and act[0] == 'retry-after': hdr, act = {'Retry-After': str(act[1])}, 429
                if isinstance(act, tuple) and act[0] == 'chunked':   # HTTP/1.0, no Content-Length: n bytes, then close
                    self.send_response(200); self.send_header('Content-Type', 'application/json'); self.end_headers()
                    for _ in range(act[1] // 65536 + 1):
                        try: self.wfile.write(b' ' * 65536)
                        except OSError: return
                    return
                if isinstance(act, tuple) and act[0] == 'raw': code, data = 200, act[1]
                elif act == 'ok': code, data = 200, json.dumps(OK).encode()
                elif act == 'empty': code, data = 200, json.dumps(completion('')).encode()
                elif act == 'null': code, data = 200, json.dumps(completion(None)).encode()
                elif act == 'malformed': code, data = 200, json.dumps(OK).encode()[:40]
                elif act == 'nochoices': code, data = 200, b'{"object": "error", "message": "upstream reset"}'
                else: code, data = act, json.dumps({'error': {'message': f'scripted {act}', 'code': act}}).encode()
                self.answered()
                send_once(self, code, data, hdr)
        self.httpd = Server(('127.0.0.1', 0), H)
        self.url = f'http://127.0.0.1:{self.httpd.server_address[1]}/v1'
    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start(); return self
    def __exit__(self, *exc):
        self.stop.set(); self.httpd.shutdown(); self.httpd.server_close()
    @property
    def gaps(self): return [b - a for a, b in zip(self.times, self.times[1:])]

def chat(backend, messages=TEXT, **kw): return asyncio.run(backend.chat(messages, **kw))

def fails(backend, messages=TEXT, **kw)->ModelError:
    with pytest.raises(ModelError) as e: chat(backend, messages, **kw)
    return e.value

def test_reply_protocol_body_and_headers():
    with Scripted('ok') as s:
        llm = OpenAIChat(s.url + '/', 'm', api_key='sk-test', defaults={'temperature': 0.0, 'max_tokens': 64, 'top_p': 0.9})
        assert isinstance(llm, ChatBackend)
        r = chat(llm, IMAGE, temperature=0.7, stop=['\n\n'], seed=3)
        r2 = chat(llm, CONT, continue_final=True)   # a second asyncio.run: a new loop, a new client
    assert r == Reply('click(x=1, y=2)', 12, 5, r.seconds, 1, 'm', s.url) and 0 < r.seconds < 5
    b = s.bodies[0]
    assert (b['model'], b['temperature'], b['max_tokens'], b['top_p'], b['stop'], b['seed']) == ('m', 0.7, 64, 0.9, ['\n\n'], 3)
    assert 'frequency_penalty' not in b and 'continue_final_message' not in b
    assert s.headers[0]['Authorization'] == 'Bearer sk-test'
    part = b['messages'][0]['content'][0]
    assert part['type'] == 'image_url' and part['image_url']['url'].startswith('data:image/png;base64,')
    png = Image.open(io.BytesIO(base64.b64decode(part['image_url']['url'].split(',', 1)[1])))
    assert (png.format, png.size) == ('PNG', SHOT.size) and png.convert('RGB').tobytes() == SHOT.tobytes()
    c = s.bodies[1]
    assert (c['continue_final_message'], c['add_generation_prompt']) == (True, False) and r2.attempts == 1
    assert c['messages'][-1] == {'role': 'assistant', 'content': [{'type': 'text', 'text': PREFIX}]}

def test_messages_helpers():
    png = io.BytesIO(); SHOT.save(png, format='PNG')
    jpg = io.BytesIO(); SHOT.save(jpg, format='JPEG')
    assert image_part(png.getvalue()) == image_part(SHOT)
    assert base64.b64decode(image_part(jpg.getvalue())['image_url']['url'].split(',', 1)[1])[:8] == b'\x89PNG\r\n\x1a\n'
    wire = to_openai_messages(IMAGE + [{'role': 'assistant', 'content': 'ok'}, {'role': 'user', 'content': [image_part(SHOT)]}])
    assert [p['type'] for p in wire[0]['content']] == ['image_url', 'text'] and wire[1]['content'] == 'ok'
    assert wire[2]['content'][0] == image_part(SHOT) and IMAGE[0]['content'][0]['type'] == 'image'

def test_dropped_connections_are_retried_with_exponential_backoff():
    with Scripted('drop', 'drop', 'ok') as s:
        t0 = time.monotonic()
        r = chat(OpenAIChat(s.url, 'm', retries=3, backoff=0.1))
        dt = time.monotonic() - t0
    assert (r.attempts, len(s.bodies), r.text) == (3, 3, 'click(x=1, y=2)')
    g1, g2 = s.gaps                                  # 0.1 then 0.2 s, each with up to 25% jitter
    assert 0.1 <= g1 < 0.1 * 1.25 + 0.15 and 0.2 <= g2 < 0.2 * 1.25 + 0.15 and dt < 1.5

def test_5xx_429_and_bad_200s_are_retried():
    with Scripted(500, 503, 'ok') as s: r = chat(OpenAIChat(s.url, 'm', backoff=0.01))
    assert (r.attempts, len(s.bodies)) == (3, 3)
    with Scripted('malformed', 'nochoices', 'ok') as s: r = chat(OpenAIChat(s.url, 'm', backoff=0.01))
    assert (r.attempts, len(s.bodies), r.prompt_tokens) == (3, 3, 12)
    with Scripted(('retry-after', 0.3), 'ok') as s: r = chat(OpenAIChat(s.url, 'm', backoff=0.01))
    assert r.attempts == 2 and 0.3 <= s.gaps[0] < 1.0  # Retry-After beats the 0.01 s backoff

@pytest.mark.parametrize('status', [400, 401, 404, 422])
def test_other_4xx_fail_at_once_naming_the_endpoint(status):
    with Scripted(status) as s: e = fails(OpenAIChat(s.url, 'qwen32b', backoff=0.01))
    assert (e.status, e.attempts, len(s.bodies)) == (status, 1, 1)
    assert s.url in str(e) and "'qwen32b'" in str(e) and f'HTTP {status}' in str(e) and f'scripted {status}' in str(e)

def test_exhausted_retries_report_the_last_cause_and_the_count():
    with Scripted(503) as s: e = fails(OpenAIChat(s.url, 'm', retries=2, backoff=0.01))
    assert (e.status, e.attempts, len(s.bodies)) == (503, 3, 3) and 'failed after 3 attempts: HTTP 503' in str(e)
    with Scripted('malformed') as s: e = fails(OpenAIChat(s.url, 'm', retries=1, backoff=0.01))
    assert e.attempts == 2 and 'malformed JSON' in str(e)
    with socket.socket() as sock: sock.bind(('127.0.0.1', 0)); port = sock.getsockname()[1]   # nothing listens there
    e = fails(OpenAIChat(f'http://127.0.0.1:{port}/v1', 'm', retries=1, backoff=0.01))
    assert e.attempts == 2 and 'ConnectError' in str(e) and f'127.0.0.1:{port}' in str(e)

def test_a_server_that_never_answers_times_out_each_attempt():
    with Scripted('hang') as s:
        t0 = time.monotonic()
        e = fails(OpenAIChat(s.url, 'm', timeout=0.3, retries=1, backoff=0.01))
        dt = time.monotonic() - t0
    assert (e.attempts, len(s.bodies)) == (2, 2) and 'no answer within 0.3 s' in str(e) and 0.6 <= dt < 1.5

def test_concurrency_limit():
    async def burst(llm, n=6):
        try: return await asyncio.gather(*[llm.chat(TEXT) for _ in range(n)])
        finally: await llm.aclose()
    with Scripted(('sleep', 0.2)) as s:
        t0 = time.monotonic()
        rs = asyncio.run(burst(OpenAIChat(s.url, 'm', max_concurrency=2)))
        dt = time.monotonic() - t0
    assert len(rs) == 6 and s.max_inflight == 2 and dt >= 0.6     # three waves of two
    with Scripted(('sleep', 0.2)) as s: asyncio.run(burst(OpenAIChat(s.url, 'm', max_concurrency=6)))
    assert s.max_inflight > 2                                       # the limit, not the server, was the bound

# ------------------------------------------------------------------ sessions, loops and descriptors

def open_fds()->int: return len(os.listdir('/proc/self/fd'))

def settles(want, within=3.0)->bool:
    "Whether `want()` holds within `within` seconds (the server side of a closed connection closes a moment later)"
    end = time.monotonic() + within
    while not want():
        if time.monotonic() > end: return False
        time.sleep(0.01)
    return True

def test_each_asyncio_run_closes_its_session_and_its_sockets():
    with ScriptedServer(lambda body: 'ok') as s:
        llm = OpenAIChat(s.url, 'm')
        asyncio.run(llm.chat(TEXT))
        before = open_fds()
        for _ in range(100): assert asyncio.run(llm.chat(TEXT)).text == 'ok'
        assert len(llm._sessions) == 0                       # each loop's shutdown closed its client
        assert settles(lambda: open_fds() <= before + 2), (before, open_fds())   # was: 2 more descriptors per call

def test_a_loop_closed_without_a_shutdown_is_forgotten():
    with ScriptedServer(lambda body: 'ok') as s:
        llm = OpenAIChat(s.url, 'm')
        for _ in range(5):
            loop = asyncio.new_event_loop()
            loop.run_until_complete(llm.chat(TEXT)); loop.close()   # no shutdown_asyncgens: the session stays behind
        assert len(llm._sessions) == 1                              # ... but only the last loop's, not one per loop

def test_loop_thread_keeps_one_session_and_closes_it():
    from coda.aio import LoopThread
    with ScriptedServer(lambda body: 'ok') as s:
        llm = OpenAIChat(s.url, 'm', max_concurrency=4)
        lt = LoopThread()
        async def burst(n): return await asyncio.gather(*(llm.chat(TEXT) for _ in range(n)))
        lt.run(burst(4))
        client = next(iter(llm._sessions.values()))[0]
        before = open_fds()
        for _ in range(50): assert [r.text for r in lt.run(burst(4))] == ['ok'] * 4
        assert next(iter(llm._sessions.values()))[0] is client and open_fds() <= before + 1   # the same keep-alive connections
        lt.close()
        assert client.is_closed and not llm._sessions and not lt.thread.is_alive()
        assert settles(lambda: open_fds() <= before - 4), (before, open_fds())   # its 4 connections, both ends, are gone
        with pytest.raises(RuntimeError, match='closed'): lt.run(burst(1))

def test_ctrl_c_while_waiting_on_the_loop_thread_cancels_the_coroutine():
    import signal
    from coda.aio import LoopThread
    cancelled = threading.Event()
    async def long():
        try: await asyncio.sleep(30)
        except asyncio.CancelledError: cancelled.set(); raise
    def interrupt(*a): raise KeyboardInterrupt
    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        with LoopThread() as lt:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            t = time.monotonic()
            with pytest.raises(KeyboardInterrupt): lt.run(long())
            assert time.monotonic() - t < 5 and cancelled.wait(2)
            assert lt.run(asyncio.sleep(0, 'still usable')) == 'still usable'
    finally: signal.setitimer(signal.ITIMER_REAL, 0); signal.signal(signal.SIGALRM, old)

def test_background_loop_is_one_per_process_and_started_again_after_close():
    from coda.aio import background_loop
    a = background_loop()
    assert background_loop() is a and a.thread.daemon and background_loop(start=False) is a
    async def where(): return threading.current_thread().name
    assert a.run(where()) == 'coda-background-loop'
    a.close()
    assert background_loop(start=False) is None
    b = background_loop()
    assert b is not a and b.run(where()) == 'coda-background-loop'

# ------------------------------------------------------------------ the test servers themselves

def raw_requests(url:str, n:int)->list:
    "Send n chat requests over one keep-alive connection; what the first recv of each answer returned"
    host, port = url.split('//')[1].split('/')[0].split(':')
    body = json.dumps({'model': 'm', 'messages': TEXT}).encode()
    req = (f'POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n'
           f'Content-Length: {len(body)}\r\n\r\n').encode() + body
    firsts = []
    with socket.create_connection((host, int(port)), timeout=5) as c:
        for _ in range(n):
            c.sendall(req)
            first = c.recv(1 << 20); firsts.append(first)
            head, _, got = first.partition(b'\r\n\r\n')
            size = int(re.search(rb'content-length: *(\d+)', head, re.I).group(1))
            while len(got) < size: got += c.recv(1 << 20)   # read the rest, if the answer came in pieces
    return firsts

def test_the_scripted_server_answers_in_one_write():
    "Headers and body written apart make the body wait for the client's delayed ACK (about 40 ms a request)"
    with ScriptedServer(lambda body: 'ok') as s:
        firsts = raw_requests(s.url, 20)
    for f in firsts:
        head, _, body = f.partition(b'\r\n\r\n')
        assert head.startswith(b'HTTP/1.1 200') and json.loads(body)['choices'][0]['message']['content'] == 'ok'

@pytest.mark.parametrize('server', [lambda: ScriptedServer(lambda body: 'ok'), lambda: Scripted('ok')], ids=['ScriptedServer', 'Scripted'])
def test_the_test_servers_take_a_burst_of_connections(server):
    "The stdlib's listen backlog of 5 drops the SYNs of a burst of 8+ clients: each dropped one connects 1 s later"
    srv = server()   # listening, not yet accepting: the backlog alone holds the burst
    try:
        conns = [socket.create_connection(srv.httpd.server_address, timeout=0.5) for _ in range(32)]
        for c in conns: c.close()
    finally: srv.httpd.server_close()

def test_from_settings():
    s = get_settings(env={}, judge_url='http://gpu3:8002/v1', judge_model='judge-7b', api_key='k', request_timeout=30)
    j = OpenAIChat.from_settings('judge', s, retries=1)
    assert (j.url, j.model, j.api_key, j.timeout, j.retries) == ('http://gpu3:8002/v1/chat/completions', 'judge-7b', 'k', 30.0, 1)
    with pytest.raises(ValueError): OpenAIChat.from_settings('critic', s)
    import pickle                                   # backends and errors travel to worker processes
    assert repr(pickle.loads(pickle.dumps(j))) == repr(j)
    e = pickle.loads(pickle.dumps(ModelError('http://x/v1', 'm', 'HTTP 500: boom', 4, 500)))
    assert (e.attempts, e.status, str(e)) == (4, 500, "chat request to http://x/v1 (model 'm') failed after 4 attempts: HTTP 500: boom")

# ------------------------------------------------------------------ servers that cannot continue a turn
def test_each_endpoint_receives_its_own_bearer_token():
    "planner, executor and judge on three servers: each request carries its role's key; a role without one sends api_key"
    with Scripted('ok') as pl, Scripted('ok') as ex, Scripted('ok') as ju:
        s = get_settings(env={'CODA_EXECUTOR_API_KEY': 'sk-executor'}, api_key='sk-shared', planner_api_key='sk-planner',
                         planner_url=pl.url, executor_url=ex.url, judge_url=ju.url)
        for role in ('planner', 'executor', 'judge'): chat(OpenAIChat.from_settings(role, s, retries=0))
    assert [srv.headers[0]['Authorization'] for srv in (pl, ex, ju)] == ['Bearer sk-planner', 'Bearer sk-executor', 'Bearer sk-shared']

def test_continue_final_refused_with_422_is_sent_again_without_the_fields_and_remembered(caplog):
    "transformers serve's answer to vLLM's fields (422 'Unexpected fields'): one retry without them, learnt per server, one warning"
    with ScriptedServer(lambda body: 'click(start_box=(1,2))', continue_final=False) as srv, caplog.at_level('WARNING', 'coda.models'):
        llm = OpenAIChat(srv.url, 'executor', backoff=0.01)
        assert llm.continue_final_supported is None
        r = chat(llm, CONT, continue_final=True)
        assert (r.text, r.attempts, r.continued, llm.continue_final_supported) == ('click(start_box=(1,2))', 2, False, False)
        assert ['continue_final_message' in b for b in srv.requests] == [True, False]
        assert 'add_generation_prompt' not in srv.requests[1] and srv.requests[1]['messages'][-1]['role'] == 'assistant'
        r2 = chat(llm, CONT, continue_final=True)                       # learnt: no refused request any more
        other = OpenAIChat(srv.url, 'executor')                           # another backend on the same server knows it too
        r3 = chat(other, CONT, continue_final=True)
        assert (r2.attempts, r3.attempts, other.continue_final_supported, len(srv.requests)) == (1, 1, False, 4)
        assert not any('continue_final_message' in b for b in srv.requests[1:])
    warned = [m for m in caplog.messages if 'refused continue_final_message' in m]
    assert len(warned) == 1 and srv.url in warned[0]

def test_continue_final_400_with_any_body_is_retried_but_a_lasting_400_is_reported_as_is():
    with Scripted(400, 'ok') as s:                                          # a 400 that names nothing: the retry decides
        llm = OpenAIChat(s.url, 'm', backoff=0.01)
        r = chat(llm, CONT, continue_final=True)
    assert (r.attempts, r.continued, llm.continue_final_supported, len(s.bodies)) == (2, False, False, 2)
    with Scripted(400) as s:                                                # the fields were not the trouble
        llm = OpenAIChat(s.url, 'm', backoff=0.01)
        e = fails(llm, CONT, continue_final=True)
    assert (e.status, e.attempts, len(s.bodies), llm.continue_final_supported) == (400, 1, 2, None) and 'scripted 400' in str(e)
    with Scripted('ok') as s:                                               # vLLM: continued, and known
        llm = OpenAIChat(s.url, 'm')
        r, plain = chat(llm, CONT, continue_final=True), chat(llm)
    assert (r.continued, plain.continued, llm.continue_final_supported) == (True, None, True)
    with Scripted(422) as s: e = fails(OpenAIChat(s.url, 'm', backoff=0.01))   # without continue_final a 422 is not retried
    assert (e.status, len(s.bodies)) == (422, 1)

# ------------------------------------------------------------------ preflight
def test_preflight_names_a_model_that_is_not_served():
    with ScriptedServer(lambda body: 'OK', models=['qwen32b', 'tars1.5-grounding']) as srv:
        with pytest.raises(ModelError) as e: asyncio.run(preflight(OpenAIChat(srv.url, 'qwen72b', retries=0)))
        msg = str(e.value)
        assert f"model 'qwen72b' is not served at {srv.url}; served: ['qwen32b', 'tars1.5-grounding']" in msg and e.value.status == 404
        pf = preflight_sync(OpenAIChat(srv.url, 'qwen32b'))
        assert {k: pf[k] for k in ('url', 'model', 'listed', 'served', 'continue_final')} == \
            dict(url=srv.url, model='qwen32b', listed=True, served=['qwen32b', 'tars1.5-grounding'], continue_final=None)
        assert [b['model'] for b in srv.requests] == ['qwen72b'] and 0 <= pf['seconds'] < 5   # a listed model costs no chat request

def test_preflight_probes_continue_final_and_finds_a_dead_server_at_once():
    with ScriptedServer(lambda body: 'OK', models=['tars'], continue_final=False) as srv:
        assert preflight_sync(OpenAIChat(srv.url, 'tars', backoff=0.01), continue_final=True)['continue_final'] is False
    with ScriptedServer(lambda body: 'OK') as srv:                       # lists nothing: a 1-token request decides
        pf = preflight_sync(OpenAIChat(srv.url, 'anything'), continue_final=True)
        assert (pf['listed'], pf['served'], pf['continue_final']) == (False, [], True)
        assert [(b['max_tokens'], 'continue_final_message' in b) for b in srv.requests] == [(1, False), (1, True)]
    with socket.socket() as sock: sock.bind(('127.0.0.1', 0)); port = sock.getsockname()[1]   # nothing listens there
    url = f'http://127.0.0.1:{port}/v1'
    t0 = time.monotonic()
    with pytest.raises(ModelError, match='is the server running') as e: preflight_sync(OpenAIChat(url, 'qwen32b'))
    assert url in str(e.value) and "'qwen32b'" in str(e.value) and time.monotonic() - t0 < 2   # no retries with backoff

# ------------------------------------------------------------------ hostile replies: empty, huge, deep, endless waits
def test_an_empty_completion_is_retried_then_an_error():
    "An always-empty server used to score 0 % with 0 errors: an empty reply is now a failed attempt, counted as an error"
    with Scripted('empty', 'ok') as s: r = chat(OpenAIChat(s.url, 'm', backoff=0.01))
    assert (r.text, r.attempts, len(s.bodies)) == ('click(x=1, y=2)', 2, 2)
    for act in ('empty', 'null'):
        with Scripted(act) as s: e = fails(OpenAIChat(s.url, 'm', retries=2, backoff=0.01))
        assert (e.attempts, len(s.bodies)) == (3, 3) and 'empty completion' in str(e) and "finish_reason 'stop'" in str(e)
    cut = completion(''); cut['choices'][0]['finish_reason'] = 'length'   # max_tokens spent on tokens with no text: an answer
    with Scripted(('raw', json.dumps(cut).encode())) as s: r = chat(OpenAIChat(s.url, 'm', backoff=0.01))
    assert (r.text, r.attempts) == ('', 1)
    with Scripted('empty') as s:   # preflight's 1-token probes take an empty answer: the server is there and serves the model
        pf = preflight_sync(OpenAIChat(s.url, 'm', backoff=0.01), continue_final=True)
    assert (pf['continue_final'], len(s.bodies)) == (True, 2)

def test_an_empty_reply_is_retried_at_the_next_seed_without_waiting():
    "The same seed would give the same empty reply: a seeded request is retried at seed + 1, so a seeded run stays reproducible"
    with Scripted('empty', 'empty', 'ok') as s:
        t0 = time.monotonic()
        r = chat(OpenAIChat(s.url, 'm', backoff=5.0), seed=41)
    assert (r.attempts, [b['seed'] for b in s.bodies]) == (3, [41, 42, 43]) and time.monotonic() - t0 < 2   # no backoff
    with Scripted(500, 'ok') as s: chat(OpenAIChat(s.url, 'm', backoff=0.01), seed=7)
    assert [b['seed'] for b in s.bodies] == [7, 7]          # a server failure is retried with the same seed

@pytest.mark.parametrize('after', ['inf', '1e9', 'nan', '-5', '86400'])
def test_retry_after_never_waits_past_the_timeout(after):
    "`Retry-After: inf` once waited 60 s per retry whatever the timeout; every wait is now within the request timeout"
    with Scripted(('retry-after', after), 'ok') as s:
        t0 = time.monotonic()
        r = chat(OpenAIChat(s.url, 'm', timeout=0.4, backoff=0.01))
        dt = time.monotonic() - t0
    assert r.attempts == 2 and dt < 1.5, dt
    from coda import models
    llm = OpenAIChat('http://127.0.0.1:9/v1', 'm', timeout=600, backoff=0.5)
    assert llm._delay(1, 1e9) == models.MAX_RETRY_WAIT <= 60 and llm._delay(2000) == models.MAX_RETRY_WAIT   # no overflow

def test_a_reply_body_over_the_cap_is_refused_unread(monkeypatch):
    from coda import models
    assert 1 << 20 <= models.MAX_RESPONSE_BYTES < 64 << 20
    monkeypatch.setattr(models, 'MAX_RESPONSE_BYTES', 4096)
    big = json.dumps(completion('x' * 10_000)).encode()
    with Scripted(('raw', big), 'ok') as s: e = fails(OpenAIChat(s.url, 'm', backoff=0.01))
    assert (e.attempts, len(s.bodies)) == (1, 1) and 'larger than MAX_RESPONSE_BYTES (4096)' in str(e) and str(len(big)) in str(e)
    t0 = time.monotonic()
    with Scripted(('chunked', 64 << 20)) as s: e = fails(OpenAIChat(s.url, 'm', backoff=0.01))   # no Content-Length: reading stops
    assert 'larger than MAX_RESPONSE_BYTES' in str(e) and time.monotonic() - t0 < 5
    with Scripted(('raw', json.dumps(completion('y' * 1000)).encode())) as s: assert chat(OpenAIChat(s.url, 'm')).text == 'y' * 1000

def test_deeply_nested_json_is_a_model_error_not_a_recursion_error():
    deep = b'{"choices": ' + b'[' * 100_000 + b']' * 100_000 + b'}'
    with Scripted(('raw', deep)) as s: e = fails(OpenAIChat(s.url, 'm', retries=1, backoff=0.01))
    assert (e.attempts, len(s.bodies)) == (2, 2) and 'nested too deeply' in str(e)

def test_hostile_fields_of_a_completion_are_dropped_or_cleaned():
    body = completion('a \ud83d b', model={'x': 1}, usage={'prompt_tokens': 'many', 'completion_tokens': -3})
    with Scripted(('raw', json.dumps(body).encode())) as s: r = chat(OpenAIChat(s.url, 'served'))
    assert (r.text, r.prompt_tokens, r.completion_tokens, r.model) == ('a \ufffd b', None, None, 'served')
    r.text.encode('utf-8')
    big = b'{"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": ' + b'9' * 5000 + b'}}'
    with Scripted(('raw', big), 'ok') as s: r = chat(OpenAIChat(s.url, 'm', backoff=0.01))   # over Python's int digit limit
    assert r.attempts == 2

# ------------------------------------------------------------------ the tiny model, in process and served

# the fixtures `tiny`, `local` and `served` (a real `transformers serve` over the tiny model) are in conftest.py

def test_tiny_model_folder_is_standard(tiny, local):
    cfg = json.loads((tiny/'processor_config.json').read_text())
    assert cfg['processor_class'] == 'Qwen2_5_VLProcessor' and (tiny/'chat_template.jinja').is_file()
    assert type(local.processor).__name__ == 'Qwen2_5_VLProcessor' and type(local.model).__name__ == 'Qwen2_5_VLForConditionalGeneration'
    x = local.encode(IMAGE)
    assert (x['input_ids'] == local.model.config.image_token_id).sum() == 64 and x['image_grid_thw'].tolist() == [[1, 16, 16]]

def test_local_image_text_and_token_counts(local, tiny):
    r_img, r_txt = chat(local, IMAGE, max_tokens=6), chat(local, TEXT, max_tokens=6)
    assert isinstance(local, ChatBackend) and isinstance(r_img.text, str)
    assert r_img.prompt_tokens - r_txt.prompt_tokens == IMG_TOKENS
    assert r_img.prompt_tokens == local.encode(IMAGE)['input_ids'].shape[1]
    assert 1 <= r_img.completion_tokens <= 6 and r_img.attempts == 1 and r_img.endpoint == f'local:{tiny}' and r_img.model == str(tiny)
    png = io.BytesIO(); SHOT.save(png, format='PNG')   # bytes and data-URL images give the same prompt as a PIL image
    for part in ({'type': 'image', 'image': png.getvalue()}, image_part(SHOT)):
        assert chat(local, [{'role': 'user', 'content': [part, IMAGE[0]['content'][1]]}], max_tokens=1).prompt_tokens == r_img.prompt_tokens

def test_local_continue_final_continues_the_prefix(local):
    ids = local.encode(CONT, continue_final=True)['input_ids'][0].tolist()
    tok = local.tokenizer
    pre, head = tok.encode(PREFIX), tok.encode('<|im_start|>assistant\n')
    start = max(i for i, t in enumerate(ids) if t == tok.convert_tokens_to_ids('<|im_start|>'))   # the last turn's header
    assert ids[start:] == head + pre                      # ends with the prefix's own tokens ...
    assert tok.convert_tokens_to_ids('<|im_end|>') not in ids[start:]   # ... and the turn is left open
    closed = local.encode(CONT)['input_ids'][0].tolist()         # without: the turn is closed and a new one opened
    assert closed[:len(ids)] == ids and local.tokenizer.decode(closed[len(ids):]) == '<|im_end|>\n<|im_start|>assistant\n'
    r = chat(local, CONT, continue_final=True, max_tokens=5)
    assert r.prompt_tokens == len(ids) and 1 <= r.completion_tokens <= 5 and not r.text.startswith(PREFIX)
    with pytest.raises(ValueError, match='assistant message last'): chat(local, IMAGE, continue_final=True)

def test_local_errors_name_the_model(local, tiny):
    e = fails(local, [{'role': 'user', 'content': [{'type': 'image', 'image': b'not an image'}]}])
    assert f'local:{tiny}' in str(e) and 'UnidentifiedImageError' in str(e)

def test_local_sampling_parameters(local):
    greedy = [chat(local, TEXT, temperature=0, max_tokens=8) for _ in range(2)]
    assert greedy[0].text == greedy[1].text
    a, b = (chat(local, TEXT, temperature=1.0, seed=7, max_tokens=8) for _ in range(2))
    assert (a.text, a.completion_tokens) == (b.text, b.completion_tokens)           # a seed makes sampling repeatable
    assert len({chat(local, TEXT, temperature=1.0, seed=s, max_tokens=8).text for s in range(4)}) > 1   # and it does sample
    kw = local._generate_kwargs({'temperature': 0.7, 'top_p': 0.9, 'max_tokens': 3, 'stop': ['\n'], 'frequency_penalty': 1.0}, 10)
    assert (kw['do_sample'], kw['temperature'], kw['top_p'], kw['max_new_tokens'], kw['stop_strings']) == (True, 0.7, 0.9, 3, ['\n'])
    assert local.model.config.image_token_id in kw['suppress_tokens']
    assert local._generate_kwargs({'temperature': 0}, 10)['do_sample'] is False
    assert chat(local, TEXT, frequency_penalty=1.5, temperature=0, max_tokens=8).completion_tokens <= 8
    t = greedy[0].text                                      # a stop string cuts the text where it first appears
    if len(t) >= 2:
        stop = t[len(t) // 2]
        r = chat(local, TEXT, temperature=0, max_tokens=8, stop=[stop])
        assert r.text == t[:t.index(stop)] and r.completion_tokens <= greedy[0].completion_tokens

def test_local_frequency_penalty_is_openais():
    import torch
    from coda.models import _FrequencyPenalty
    ids = torch.tensor([[5, 1, 2, 2, 3, 2]])                 # prompt [5, 1], generated [2, 2, 3, 2]
    out = _FrequencyPenalty(0.5, prompt_len=2)(ids, torch.zeros(1, 6))
    assert out.tolist() == [[0, 0, -1.5, -0.5, 0, 0]]

def test_serve_text_and_image(served, tiny, local):
    llm = OpenAIChat(served, str(tiny), timeout=60)
    r_img, r_txt = chat(llm, IMAGE, max_tokens=6), chat(llm, TEXT, max_tokens=6)
    assert r_img.prompt_tokens - r_txt.prompt_tokens == IMG_TOKENS
    assert r_img.prompt_tokens == local.encode(IMAGE)['input_ids'].shape[1]   # the server's prompt is LocalChat's
    assert r_img.completion_tokens <= 6 and r_img.attempts == 1 and r_img.endpoint == served and r_img.model.startswith(str(tiny))
    raw = __import__('httpx').post(served + '/chat/completions', timeout=60, json=llm.request_body(IMAGE, max_tokens=4)).json()
    assert raw['object'] == 'chat.completion' and raw['choices'][0]['message']['role'] == 'assistant'
    assert raw['usage']['total_tokens'] == raw['usage']['prompt_tokens'] + raw['usage']['completion_tokens']
    async def three():
        try: return await asyncio.gather(*[llm.chat(IMAGE, max_tokens=4) for _ in range(3)])
        finally: await llm.aclose()
    assert [r.prompt_tokens for r in asyncio.run(three())] == [r_img.prompt_tokens] * 3

def test_serve_final_assistant_turn_is_not_continued(served, tiny, local):
    """transformers serve 5.23 rejects vLLM's continuation fields (422) and renders a final assistant message as a
    closed turn followed by a new `<|im_start|>assistant`: it cannot continue a prefix. OpenAIChat sends the request
    again without the fields, and learns that this server does not continue turns."""
    import httpx
    raw = httpx.post(served + '/chat/completions', timeout=60, json=OpenAIChat(served, str(tiny)).request_body(CONT, True, max_tokens=4))
    assert raw.status_code == 422 and 'continue_final_message' in raw.text
    llm = OpenAIChat(served, str(tiny), timeout=60, backoff=0.01)
    r_cf = chat(llm, CONT, continue_final=True, max_tokens=4)
    r = chat(llm, CONT, max_tokens=4)
    closed, open_ = (local.encode(CONT, continue_final=c)['input_ids'].shape[1] for c in (False, True))
    assert r.prompt_tokens == r_cf.prompt_tokens == closed > open_
    assert (r_cf.attempts, r_cf.continued, llm.continue_final_supported) == (2, False, False)
    pf = preflight_sync(OpenAIChat(served, str(tiny), timeout=60), continue_final=True)
    assert (pf['listed'], pf['served'], pf['continue_final']) == (False, [], False)   # it lists nothing for a served folder
    with pytest.raises(ModelError, match='pinned'): preflight_sync(OpenAIChat(served, 'another-model', backoff=0.01))
    e = fails(OpenAIChat(served, 'another-model', backoff=0.01))   # the server is pinned to its folder: a 400, not retried
    assert (e.status, e.attempts) == (400, 1) and 'pinned' in str(e)

def test_local_sampling_differs_between_calls_and_repeats_with_a_seed(local):
    "Without a seed each sampled call draws a fresh one (votes and the k samples of a task must differ); a backend seed repeats runs"
    texts = [chat(local, TEXT, max_tokens=8, temperature=2.0).text for _ in range(6)]
    assert len(set(texts)) > 1, texts
    from coda.models import LocalChat
    a, b = (LocalChat(model=local.model, processor=local.processor, seed=7) for _ in range(2))
    assert [chat(a, TEXT, max_tokens=8, temperature=2.0).text for _ in range(3)] == [chat(b, TEXT, max_tokens=8, temperature=2.0).text for _ in range(3)]
    assert chat(a, TEXT, max_tokens=8, temperature=2.0, seed=5).text == chat(b, TEXT, max_tokens=8, temperature=2.0, seed=5).text

def test_two_local_models_sampling_at_once_give_each_seeds_reply(tiny):
    "torch's RNG is one per process: seeded calls of two models running at once (a base and a fine-tuned judge on one server) must not draw from each other's seeds"
    import asyncio
    a, b = LocalChat(tiny), LocalChat(tiny)
    calls = [(m, s) for s in range(6) for m in (a, b)]
    kw = dict(temperature=1.0, max_tokens=24)
    from coda.aio import run_sync
    alone = [run_sync(m.chat(TEXT, seed=s, **kw)).text for m, s in calls]
    async def together(): return await asyncio.gather(*(m.chat(TEXT, seed=s, **kw) for m, s in calls))
    for _ in range(3): assert [r.text for r in run_sync(together())] == alone
