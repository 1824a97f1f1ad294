"""Fuzz: the action parser and the model client's completion parsing under random and hostile input (tests/fuzz.py).

Seeded, so every run feeds the same inputs; under 10 s on one core. The parser must return a non-empty list of
Actions with finite coordinates and storable text, whose pyautogui code compiles (`compile()` only, never run),
within a per-input time limit; `split_reply` likewise. The client's `_parse_completion` must return a clean
completion or raise its own `_Retry`, whatever the body; the real client over HTTP must answer or raise
`ModelError`, nothing else."""
import asyncio, json, math, random, threading
from http.server import BaseHTTPRequestHandler
import httpx
from fuzz import fuzz, nasty_text, rng
from agent_fixtures import Server, send_once
from uitars_ref import load_corpus
from test_properties import TOKENS
from coda import actions
from coda.actions import Action, KINDS, parse_action, split_reply, to_pyautogui
from coda.models import ModelError, OpenAIChat, _parse_completion, _Retry

CORPUS = [e['text'] for e in load_corpus()]
PIECES = TOKENS + ['```ANS ', '```', 'ANS', 'FAIL', '`', 'pyautogui.', '3click(', 'Action:', ',', 'k=', '\\u', '\\ud83d',
                   '\\ude00', '\\x4', '{', '}', ';', 'f(', '1,', "'a',", '[],', 'k=1,', 'x' * 50, ' ' * 50]

def check_parse(text, screen=(1280, 800), coords='absolute'):
    "Everything parse_action promises, on one input"
    acts = parse_action(text, screen=screen, coords=coords)
    assert isinstance(acts, list) and acts
    for a in acts:
        assert isinstance(a, Action) and a.kind in KINDS
        for v in (a.x, a.y, a.x2, a.y2): assert v is None or math.isfinite(v), a
        assert isinstance(a.text, str) and isinstance(a.keys, tuple)
    json.dumps([a.to_dict() for a in acts], ensure_ascii=False).encode('utf-8')   # storable: no lone surrogates
    compile(to_pyautogui(acts), '<fuzz>', 'exec')                                 # compiled, never run

def mutate(r, s):
    "A reply with a few random insertions, deletions, duplications or a truncation"
    for _ in range(r.randint(1, 5)):
        i = r.randint(0, len(s)); j = r.randint(i, len(s)); op = r.random()
        if op < .4: s = s[:i] + (r.choice(PIECES) if r.random() < .7 else nasty_text(r, 20)) + s[i:]
        elif op < .6: s = s[:i] + s[j:]
        elif op < .85: s = s[:j] + s[i:j] * r.randint(1, 5) + s[j:]
        else: s = s[:i]
    return s

def test_fuzz_parser_nasty_text():
    r = rng(1)
    c = fuzz('parse_action nasty text', (nasty_text(r, 400) for _ in range(10_000)),
             lambda s: check_parse(s, coords=r.choice(['absolute', 'relative1000'])), limit_s=0.5)
    c.assert_clean()

def test_fuzz_parser_corpus_mutations():
    r = rng(2)
    c = fuzz('parse_action corpus mutations', (mutate(r, r.choice(CORPUS)) for _ in range(10_000)),
             lambda s: check_parse(s, screen=r.choice([(1280, 800), (1920, 1080)])), limit_s=0.5)
    c.assert_clean()

def test_fuzz_parser_token_soup():
    r = rng(3)
    c = fuzz('parse_action token soup', (''.join(r.choice(PIECES) for _ in range(r.randint(0, 60))) for _ in range(10_000)),
             check_parse, limit_s=0.5)
    c.assert_clean()

def long_input(r):
    "A long reply: a few random pieces repeated to 16 KB - 1 MB, after a random head"
    unit = ''.join(r.choice(PIECES) for _ in range(r.randint(1, 4))) or 'x'
    n = r.choice([16_000, 64_000, 256_000, 1_000_000])
    head = mutate(r, r.choice(CORPUS)) if r.random() < .5 else ''
    return head + (unit * (n // len(unit) + 1))[:n]

def test_fuzz_parser_long_inputs():
    r = rng(4)
    inputs = [long_input(r) for _ in range(100)] + ['x' * (getattr(actions, 'MAX_REPLY', 1 << 20) + 1)]
    c = fuzz('parse_action long inputs (16 KB - 1 MB)', inputs, check_parse, limit_s=1.0)
    c.assert_clean()

def test_fuzz_split_reply():
    r = rng(5)
    def check(s):
        th, act = split_reply(s)
        assert isinstance(th, str) and isinstance(act, str)
        (th + act).encode('utf-8')
    c = fuzz('split_reply', (mutate(r, r.choice(CORPUS)) if r.random() < .5 else nasty_text(r, 400) for _ in range(5000)),
             check, limit_s=0.5)
    c.assert_clean()

# ------------------------------------------------------------------ the model client
def json_value(r, depth=0):
    "A random JSON-able value, sometimes of a hostile kind"
    k = r.random()
    if depth > 3 or k < .3: return r.choice([None, True, 0, -1, 2**70, 1.5, float('nan'), float('inf'), '', 'x', nasty_text(r, 30)])
    if k < .6: return [json_value(r, depth + 1) for _ in range(r.randint(0, 3))]
    return {r.choice(['choices', 'message', 'content', 'usage', 'model', 'prompt_tokens', nasty_text(r, 5)]): json_value(r, depth + 1)
            for _ in range(r.randint(0, 4))}

def hostile_body(r)->bytes:
    "A reply body: a completion with random fields, random JSON, deep nesting, huge numbers, broken UTF-8 or junk"
    k = r.random()
    if k < .35:
        msg = {'role': 'assistant', 'content': r.choice([nasty_text(r, 200), '', None, json_value(r)])}
        if r.random() < .3: msg = json_value(r)
        d = {'choices': [{'message': msg, 'finish_reason': json_value(r)}] if r.random() < .8 else json_value(r),
             'usage': json_value(r) if r.random() < .5 else {'prompt_tokens': json_value(r), 'completion_tokens': json_value(r)},
             'model': json_value(r)}
        return json.dumps(d).encode()
    if k < .55: return json.dumps(json_value(r)).encode()
    if k < .65:
        d = r.randint(1000, 200_000); o, c = r.choice([('[', ']'), ('{"a":', '}')])
        return (o * d + '1' + c * d).encode()
    if k < .72: return b'{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": ' + b'9' * r.randint(4000, 20000) + b'}}'
    if k < .85: return bytes(r.randrange(256) for _ in range(r.randint(0, 300)))
    return nasty_text(r, 300).encode('utf-8', 'surrogatepass')

def test_fuzz_completion_parsing():
    r = rng(6)
    def check(body):
        text, pt, ct, model = _parse_completion(httpx.Response(200, content=body))
        assert isinstance(text, str) and (text or b'length' in body) and (model is None or isinstance(model, str))
        assert all(v is None or (type(v) is int and v >= 0) for v in (pt, ct))
        (text + (model or '')).encode('utf-8')
    c = fuzz('_parse_completion hostile bodies', (hostile_body(r) for _ in range(5000)), check, limit_s=0.5, expected=(_Retry,))
    c.assert_clean()

class BodyServer:
    "A real HTTP server on 127.0.0.1 answering every request with 200 and the body in `self.body`"
    def __init__(self):
        srv = self; self.body = b''
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a): pass
            def do_POST(self):
                self.rfile.read(int(self.headers['Content-Length']))
                send_once(self, 200, srv.body)
        self.httpd = Server(('127.0.0.1', 0), H)
        self.url = f'http://127.0.0.1:{self.httpd.server_address[1]}/v1'
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
    def close(self): self.httpd.shutdown(); self.httpd.server_close()

def test_fuzz_client_over_http():
    r, srv = rng(7), BodyServer()
    llm = OpenAIChat(srv.url, 'm', retries=0, timeout=5)
    loop = asyncio.new_event_loop()
    def check(body):
        srv.body = body
        rep = loop.run_until_complete(llm.chat([{'role': 'user', 'content': 'hi'}]))
        assert isinstance(rep.text, str) and (rep.text or b'length' in body)
        rep.text.encode('utf-8')
    try: c = fuzz('OpenAIChat hostile bodies over HTTP', (hostile_body(r) for _ in range(300)), check, limit_s=2.0, expected=(ModelError,))
    finally:
        loop.run_until_complete(llm.aclose()); loop.close(); srv.close()
    c.assert_clean()
