"""coda.serve against a real server subprocess (`LocalServer`, one per module): the tiny Qwen2.5-VL answering
`OpenAIChat` with an image and with a continued turn, backends and codecs by dotted name (tests/serve_fixtures.py),
models registered and removed at runtime, errors in OpenAI's form, concurrency, and a stop that frees the port; the admin
token (from the environment or printed once, never on a command line), `--allow`, entry points, `--allowed-host` and
`--max-body-mib` (tests/test_attack_serve.py has the attacks).

Replies of the random model are noise: the tests assert on protocol, shapes and token counts, never on its text."""
import asyncio, json, os, socket, subprocess, sys, time
from pathlib import Path
import httpx, pytest
from coda.models import ModelError, OpenAIChat, image_part
from coda.procs import free_port
from coda.serve import TOKEN_ENV, LocalServer, add_serve_local_args, allowed_names, check_spec, load_backend, parse_model_arg
from coda.plugins import load_object
from serve_fixtures import UpperCodec

HERE = Path(__file__).parent
from agent_fixtures import IMG_TOKENS, SHOT, TEXT, IMAGE, PREFIX, CONT   # the chat requests both model tests send
TREE = [{'role': 'user', 'content': [{'type': 'text', 'text': "[text field] Expression @(10,730,900,764)"}]},   # nbs/mini/01_grounder
        {'role': 'assistant', 'content': [{'type': 'text', 'text': "Thought: Click 'Expression'.\nAction: "}]}]
FIXTURES = {'echo': {'backend': 'serve_fixtures:Echo'},
            'slow': {'backend': 'serve_fixtures:Echo', 'args': {'delay': 0.5}},
            'upper': {'backend': 'serve_fixtures:Echo', 'codec': 'serve_fixtures:UpperCodec'},
            'boom': {'backend': 'serve_fixtures:Boom'},
            'grounder': {'backend': 'coda.mini.grounder:A11yGrounder'}}
ENV = {'PYTHONPATH': str(HERE)}   # the server imports serve_fixtures

@pytest.fixture(scope='module')
def server(tiny, tmp_path_factory):
    with LocalServer({'tiny': str(tiny), **FIXTURES}, log=tmp_path_factory.mktemp('serve')/'server.log', env=ENV) as s: yield s

def chat(server, model, messages, retries=0, **kw):
    "One `OpenAIChat` call to the server"
    async def go():
        async with OpenAIChat(server.url, model, timeout=60, retries=retries, backoff=0.01) as llm: return await llm.chat(messages, **kw)
    return asyncio.run(go())

def echoed(reply)->dict: return json.loads(reply.text)

def post(server, body=None, content=None)->tuple:
    r = httpx.post(server.url + '/chat/completions', json=body, content=content, headers={'Content-Type': 'application/json'}, timeout=30)
    return r.status_code, r.json()

# ------------------------------------------------------------------ the tiny model

def test_tiny_answers_with_an_image(server):
    img = chat(server, 'tiny', IMAGE, max_tokens=4)
    txt = chat(server, 'tiny', TEXT, max_tokens=4)
    assert img.prompt_tokens - txt.prompt_tokens == IMG_TOKENS
    assert 1 <= img.completion_tokens <= 4 and isinstance(img.text, str)
    assert (img.model, img.endpoint, img.attempts) == ('tiny', server.url, 1)

def test_continue_final_is_honoured(server):
    closed = chat(server, 'tiny', CONT, max_tokens=4)
    cont = chat(server, 'tiny', CONT, continue_final=True, max_tokens=4)
    assert cont.prompt_tokens < closed.prompt_tokens   # no '<|im_end|>\n<|im_start|>assistant\n' after the prefix
    seen = echoed(chat(server, 'echo', CONT, continue_final=True, max_tokens=4, temperature=0.0))
    assert seen['kw'] == {'continue_final': True, 'temperature': 0.0, 'max_tokens': 4}
    assert seen['messages'][0]['content'][0]['image'] == 'png'   # the data URL reached the backend as PNG bytes
    assert seen['messages'][1] == {'role': 'assistant', 'content': [{'text': PREFIX}]}
    assert echoed(chat(server, 'echo', CONT))['kw'] == {'continue_final': False}

def test_continue_final_needs_an_assistant_turn(server):
    status, body = post(server, {'model': 'echo', 'messages': TEXT, 'continue_final_message': True, 'add_generation_prompt': False})
    assert status == 400 and body['error']['type'] == 'BadRequestError' and 'assistant message last' in body['error']['message']

# ------------------------------------------------------------------ names

def test_unknown_model_is_404_at_once(server):
    t0 = time.monotonic()
    with pytest.raises(ModelError) as e: chat(server, 'qwen32b', TEXT, retries=3)
    assert time.monotonic() - t0 < 2
    assert (e.value.status, e.value.attempts) == (404, 1)
    assert 'The model `qwen32b` does not exist.' in str(e.value)

def test_models_registered_at_runtime(server, tiny):
    ids = [m['id'] for m in httpx.get(server.url + '/models').json()['data']]
    assert sorted(ids) == sorted(['tiny', *FIXTURES])
    server.register('tiny-short', {'path': str(tiny), 'defaults': {'max_tokens': 2}})
    assert 'tiny-short' in [m['id'] for m in httpx.get(server.url + '/models').json()['data']]
    assert server.models()['tiny-short'] == {'path': str(tiny), 'defaults': {'max_tokens': 2}}
    assert 1 <= chat(server, 'tiny-short', TEXT).completion_tokens <= 2   # the spec's defaults apply
    server.unregister('tiny-short')
    with pytest.raises(ModelError) as e: chat(server, 'tiny-short', TEXT)
    assert e.value.status == 404 and 'tiny-short' not in server.models() and 'tiny-short' not in server.specs
    with pytest.raises(RuntimeError, match="HTTP 500: could not load model `bad`: FileNotFoundError: no model folder"):
        server.register('bad', str(HERE/'no-such-model'), load=True)
    with pytest.raises(RuntimeError, match='HTTP 400: unknown keys'): server.register('bad', {'path': str(tiny), 'temprature': 1})
    assert 'bad' not in server.models()

# ------------------------------------------------------------------ backends and codecs by name

def test_backend_factory_grounds(server):
    r = chat(server, 'grounder', TREE, continue_final=True)
    assert r.text == "click(start_box='(458,758)')"
    assert (r.prompt_tokens, r.completion_tokens) == (0, 0)   # the grounder counts no tokens

def test_codec_on_both_sides(server):
    r = chat(server, 'upper', IMAGE)
    assert r.text.endswith(UpperCodec.MARK)
    seen = json.loads(r.text[:-len(UpperCodec.MARK)])
    assert seen['messages'][0]['content'][1] == {'text': 'OPEN THE FILE MENU.'}
    assert seen['messages'][0]['content'][0]['image'] == 'png'

# ------------------------------------------------------------------ concurrency and failures

def test_concurrent_requests(server):
    async def go():
        async with OpenAIChat(server.url, 'slow', retries=0) as slow, OpenAIChat(server.url, 'tiny', retries=0, timeout=60) as tiny:
            t0 = time.monotonic()
            rs = await asyncio.gather(*[slow.chat(TEXT, seed=i) for i in range(8)])
            slow_s = time.monotonic() - t0
            return rs, slow_s, await asyncio.gather(*[tiny.chat(IMAGE if i % 2 else TEXT, max_tokens=3) for i in range(8)])
    rs, slow_s, tiny_rs = asyncio.run(go())
    assert sorted(echoed(r)['kw']['seed'] for r in rs) == list(range(8))
    assert slow_s < 2.0, slow_s   # eight 0.5 s replies at once, not 4 s one after another
    assert all(1 <= r.completion_tokens <= 3 for r in tiny_rs)
    assert len({r.prompt_tokens for r in tiny_rs}) == 2

def test_backend_error_is_500_naming_the_cause(server):
    with pytest.raises(ModelError) as e: chat(server, 'boom', TEXT, retries=1)
    assert (e.value.status, e.value.attempts) == (500, 2)   # a 5xx is retried, then reported
    assert 'RuntimeError: the GPU caught fire' in str(e.value)

def test_bad_requests_in_openai_form(server):
    status, body = post(server, content=b'{"model": "echo", "messages": [')
    assert status == 400 and set(body['error']) == {'message', 'type', 'code'} and body['error']['code'] == 400
    assert post(server, {'model': 'echo', 'messages': TEXT, 'stream': True})[0] == 400
    fetch = [{'role': 'user', 'content': [{'type': 'image_url', 'image_url': {'url': 'http://127.0.0.1:1/shot.png'}}]}]
    status, body = post(server, {'model': 'echo', 'messages': fetch})
    assert status == 400 and 'fetches nothing' in body['error']['message']
    ok = {'model': 'echo', 'messages': [{'role': 'user', 'content': [image_part(SHOT), {'type': 'text', 'text': 'hi'}]}], 'max_completion_tokens': 7}
    status, body = post(server, ok)
    assert status == 200 and body['object'] == 'chat.completion' and body['choices'][0]['finish_reason'] == 'stop'
    assert json.loads(body['choices'][0]['message']['content'])['kw']['max_tokens'] == 7
    assert body['usage'] == {'prompt_tokens': 1, 'completion_tokens': 0, 'total_tokens': 1}
    assert httpx.get(server.base + '/health').json() == {'status': 'ok'}

# ------------------------------------------------------------------ the process

def test_stop_frees_the_port():
    s = LocalServer({'echo': FIXTURES['echo']}, env=ENV).start(timeout=120)
    assert s.alive and s.url == f'http://127.0.0.1:{s.port}/v1'
    assert echoed(chat(s, 'echo', TEXT))['kw'] == {'continue_final': False}
    s.stop()
    assert not s.alive
    with socket.socket() as sock:   # as a new server would bind it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(('127.0.0.1', s.port))
    s.stop()   # twice is fine

def test_start_failure_shows_the_log():
    with socket.socket() as taken:
        taken.bind(('127.0.0.1', 0))
        taken.listen()
        s = LocalServer({}, port=taken.getsockname()[1])
        with pytest.raises(RuntimeError, match='exited with code') as e: s.start(timeout=120)
    assert 'address already in use' in str(e.value).lower() and not s.alive

# ------------------------------------------------------------------ in process

def test_specs_and_names():
    assert check_spec('models/tiny') == {'path': 'models/tiny'}
    with pytest.raises(ValueError, match=r"unknown keys in a backend spec: \['arg'\]"): check_spec({'backend': 'm:x', 'arg': {}})
    with pytest.raises(ImportError, match="there is no module 'serve_fixturez'"): load_object('serve_fixturez:Echo')
    assert type(load_backend({'backend': 'serve_fixtures:Echo', 'codec': 'serve_fixtures:UpperCodec'})).__name__ == 'CodecChat'
    a = add_serve_local_args(__import__('argparse').ArgumentParser()).parse_args(
        ['--model', 'tiny=models/tiny', '--model', 'g={"backend": "coda.mini.grounder:A11yGrounder", "args": {"screen": [1920, 1080]}}'])
    assert dict(a.model) == {'tiny': {'path': 'models/tiny'}, 'g': {'backend': 'coda.mini.grounder:A11yGrounder', 'args': {'screen': [1920, 1080]}}}
    assert parse_model_arg('x=a=b.json') == ('x', {'path': 'a=b.json'})

# ------------------------------------------------------------------ the admin token, the allowlist, hosts and the body limit

def serve(tmp_path:Path, *flags:str, env:dict|None=None, timeout:float=120)->tuple:
    "`python -m coda.serve FLAGS` on a free port, started and answering /health: (process, port, log file)"
    port, log = free_port(), tmp_path/f'serve-{time.monotonic_ns()}.log'
    base_env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    with open(log, 'wb') as out:
        p = subprocess.Popen([sys.executable, '-m', 'coda.serve', '--port', str(port), *flags], stdout=out, stderr=subprocess.STDOUT,
                             env={**base_env, 'PYTHONPATH': os.pathsep.join(filter(None, (str(HERE), os.environ.get('PYTHONPATH')))), **(env or {})})
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if p.poll() is not None: return p, port, log
        try:
            if httpx.get(f'http://127.0.0.1:{port}/health', timeout=2).status_code == 200: return p, port, log
        except httpx.HTTPError: time.sleep(0.1)
    p.kill()
    raise TimeoutError(log.read_text())

def stopped(p:subprocess.Popen):
    if p.poll() is None: p.terminate()
    p.wait(20)

def test_admin_token_printed_once_when_not_given(tmp_path):
    p, port, log = serve(tmp_path, '--admin', '--allowed-host', 'gpu1', '--max-body-mib', '1')
    try:
        lines = log.read_text().splitlines()
        token = [l.rsplit(': ', 1)[1] for l in lines if 'admin token' in l]
        assert len(token) == 1 and len(token[0]) >= 40 and sum(token[0] in l for l in lines) == 1, lines
        assert token[0] not in open(f'/proc/{p.pid}/cmdline', 'rb').read().decode(errors='replace')
        base = f'http://127.0.0.1:{port}'
        assert httpx.get(base + '/coda/models', headers={'Authorization': f'Bearer {token[0]}'}).json() == {}
        assert httpx.get(base + '/coda/models').status_code == 401
        assert httpx.get(base + '/health', headers={'Host': f'gpu1:{port}'}).status_code == 200    # --allowed-host
        assert httpx.get(base + '/health', headers={'Host': f'gpu2:{port}'}).status_code == 421
        big = {'model': 'x', 'messages': [{'role': 'user', 'content': 'x' * (1 << 20)}]}
        assert httpx.post(base + '/v1/chat/completions', json=big, timeout=30).status_code == 413              # --max-body-mib 1
        assert httpx.post(base + '/v1/chat/completions', json={**big, 'messages': TEXT}, timeout=30).status_code == 404
    finally: stopped(p)

def test_admin_token_from_the_environment(tmp_path):
    token = 'a-token-the-operator-chose-' + 'x' * 20
    p, port, log = serve(tmp_path, '--admin', env={TOKEN_ENV: token})
    try:
        assert token not in log.read_text() and 'token from $CODA_SERVE_TOKEN' in log.read_text()
        assert httpx.get(f'http://127.0.0.1:{port}/coda/models', headers={'Authorization': f'Bearer {token}'}).status_code == 200
    finally: stopped(p)
    p, port, log = serve(tmp_path, '--admin', env={TOKEN_ENV: 'short'})
    stopped(p)
    assert p.returncode != 0 and 'the admin routes need a token of 16 characters or more' in log.read_text()

def test_local_server_token_stays_off_the_command_line_and_the_disk():
    with LocalServer({'echo': FIXTURES['echo']}, env=ENV) as s:
        cmdline = open(f'/proc/{s.proc.pid}/cmdline', 'rb').read().decode()
        assert s.token and s.token not in cmdline and '--admin' in cmdline
        files = [f for f in Path(s._work).rglob('*') if f.is_file()]   # models.json and the server's log
        assert len(files) == 2 and all(s.token not in f.read_text(errors='replace') for f in files), files
        first = s.token
        s.stop()
        s.start()
        assert s.token != first and s.models() == {'echo': FIXTURES['echo']}   # a fresh token each start
        assert httpx.get(s.base + '/coda/models', headers={'Authorization': f'Bearer {first}'}).status_code == 403

def test_allow_lets_the_admin_routes_load_more(tmp_path):
    with LocalServer({}, env=ENV, allow=['serve_fixtures.Boom']) as s:
        s.register('boom', {'backend': 'serve_fixtures:Boom'}, load=True)
        with pytest.raises(RuntimeError, match="HTTP 403: codec 'serve_fixtures:UpperCodec' is not allowed"):
            s.register('upper', {'backend': 'serve_fixtures:Boom', 'codec': 'serve_fixtures:UpperCodec'})
        with pytest.raises(RuntimeError, match="HTTP 403: backend 'serve_fixtures:Echo' is not allowed"): s.register('echo', FIXTURES['echo'])
        assert s.models() == {'boom': {'backend': 'serve_fixtures:Boom'}}

def test_entry_points_are_allowed(tmp_path):
    "A package installed with a `coda.backends` entry point: its backend may be named in a spec sent to the admin routes"
    dist = tmp_path/'site'/'labgrounder-0.1.dist-info'
    dist.mkdir(parents=True)
    (dist/'METADATA').write_text('Metadata-Version: 2.1\nName: labgrounder\nVersion: 0.1\n')
    (dist/'entry_points.txt').write_text('[coda.backends]\nlab = serve_fixtures:Echo\n\n[coda.codecs]\nupper = serve_fixtures:UpperCodec\n')
    sys.path.insert(0, str(tmp_path/'site'))
    try: assert {'serve_fixtures:Echo', 'serve_fixtures:UpperCodec'} <= allowed_names()
    finally: sys.path.remove(str(tmp_path/'site'))
    assert 'serve_fixtures:Echo' not in allowed_names()
    with LocalServer({}, env={'PYTHONPATH': os.pathsep.join((str(tmp_path/'site'), str(HERE)))}) as s:
        s.register('lab', {'backend': 'serve_fixtures:Echo', 'codec': 'serve_fixtures:UpperCodec'}, load=True)
        assert chat(s, 'lab', TEXT).text.endswith(UpperCodec.MARK)
