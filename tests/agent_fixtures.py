"""Test fixtures for the agent: a small deterministic environment and a real, scripted OpenAI-compatible HTTP server.

The server is a real HTTP server on 127.0.0.1 speaking the chat-completions protocol; only its replies are
scripted (a policy function of the request), which is what tests of the framework itself need: the protocol,
concurrency, latency and failures are real, the text is known.
"""
import json, threading, time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from PIL import Image, ImageDraw
from coda.envs.core import Observation, Element, FrameEncoder

# chat requests the model and server tests send: text, an image, and a pre-filled assistant turn to continue
IMG_TOKENS = 64 + 2   # a 224x224 image: 64 <|image_pad|> between <|vision_start|> and <|vision_end|>
SHOT = Image.new('RGB', (224, 224), (240, 240, 244))
TEXT = [{'role': 'user', 'content': [{'type': 'text', 'text': 'Open the File menu.'}]}]
IMAGE = [{'role': 'user', 'content': [{'type': 'image', 'image': SHOT}, {'type': 'text', 'text': 'Open the File menu.'}]}]
PREFIX = 'Thought: The File menu is at the top left.\nAction: '
CONT = IMAGE + [{'role': 'assistant', 'content': [{'type': 'text', 'text': PREFIX}]}]

class CounterEnv:
    "A 'counter app': the screen shows a number; clicking the + button (around (640, 400)) adds one. Answer tasks check the number."
    def __init__(self, screen=(1280, 800), target=3, delay=0.0, crash_at=None):
        self.screen, self.target, self.delay, self.crash_at = screen, target, delay, crash_at
        self.resets = self.closed = 0
        self.encoder = FrameEncoder()   # as every real environment has: only the rows that changed are deflated again
        self._bg = Image.new('RGB', screen, (236, 236, 240))
        d = ImageDraw.Draw(self._bg)
        for x in range(0, screen[0], 40): d.line([(x, 0), (x, screen[1])], fill=(220, 220, 228))
        d.rectangle([600, 370, 680, 430], fill=(90, 120, 200))
    def _obs(self):
        img = self._bg.copy()
        ImageDraw.Draw(img).text((40, 40), f'count = {self.n}', fill=(0, 0, 0))
        return Observation(img, self.screen, a11y=[Element('label', f'count = {self.n}', (40, 40, 200, 60)), Element('button', '+', (600, 370, 680, 430))],
                           encoder=self.encoder)
    def reset(self, task):
        self.resets += 1; self.n, self.last, self.steps = 0, None, 0
        return self._obs()
    def step(self, actions):
        if self.delay: time.sleep(self.delay)
        self.steps += 1
        if self.crash_at is not None and self.steps >= self.crash_at: raise RuntimeError('the app crashed')
        for a in actions:
            if a.kind == 'click' and 600 <= a.x <= 680 and 370 <= a.y <= 430: self.n += 1
            self.last = a
        return self._obs()
    def evaluate(self):
        return float(self.last is not None and self.last.kind == 'answer' and self.last.text == str(self.target))
    def close(self): self.closed += 1

def counting_policy(target=3):
    "Planner clicks + until it has clicked `target` times, then answers; executor clicks the button's centre"
    def policy(body):
        msgs = body['messages']
        if body['model'] == 'planner':
            done = sum(m['role'] == 'assistant' for m in msgs)
            if done >= target: return f"Thought: The counter shows {target}.\nAction: ```ANS {target}```"
            return "Thought: Click the + button in the middle of the window.\nAction: click(start_box='(640,400)')"
        return "click(start_box='<|box_start|>(644,406)<|box_end|>')"
    return policy

CONTINUE_FIELDS = ('continue_final_message', 'add_generation_prompt')

class Server(ThreadingHTTPServer):
    "A threading HTTP server with a realistic listen backlog: the stdlib's 5 overflows when 8 clients connect at once (each overflow a 1 s SYN retry)"
    request_queue_size = 1024
    daemon_threads = True

def send_once(handler, code:int, data:bytes, headers:dict|None=None):
    """Answer with the status line, the headers and the body in ONE write: written apart, the body waits behind
    Nagle's algorithm for the client's delayed ACK of the headers, about 40 ms on every request"""
    head = [f'{handler.protocol_version} {code} {HTTPStatus(code).phrase}', f'Content-Length: {len(data)}',
            *(f'{k}: {v}' for k, v in {'Content-Type': 'application/json', **(headers or {})}.items())]
    handler.wfile.write(('\r\n'.join(head) + '\r\n\r\n').encode('latin-1') + data)
    handler.log_request(code)

class ScriptedServer:
    """A real OpenAI-compatible chat server on 127.0.0.1 whose replies come from `policy(request_body) -> str`.
    `models`: the names GET /models lists; a request for another model then gets vLLM's 404 (default: lists nothing,
    answers any model). `continue_final=False`: a body with vLLM's continuation fields gets `transformers serve`'s 422."""
    def __init__(self, policy, latency=0.0, models=None, continue_final=True):
        self.policy, self.latency, self.requests, self.inflight, self.max_inflight = policy, latency, [], 0, 0
        self.models, self.continue_final = list(models or []), continue_final
        self._lock = threading.Lock()
        srv = self
        class H(BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'
            def log_message(self, *a): pass
            def do_GET(self):
                data = [{'id': m, 'object': 'model', 'owned_by': 'scripted'} for m in srv.models]
                self._send(200, {'status': 'ok'} if self.path.endswith('health') else {'object': 'list', 'data': data})
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
                with srv._lock: srv.inflight += 1; srv.max_inflight = max(srv.max_inflight, srv.inflight); srv.requests.append(body)
                if srv.models and body.get('model') not in srv.models:
                    with srv._lock: srv.inflight -= 1
                    return self._send(404, {'object': 'error', 'message': f"The model `{body.get('model')}` does not exist.", 'code': 404})
                if not srv.continue_final and (extra := sorted(f for f in CONTINUE_FIELDS if f in body)):
                    with srv._lock: srv.inflight -= 1
                    return self._send(422, {'detail': f"Unexpected fields in the request: {set(extra)}"})
                try:
                    if srv.latency: time.sleep(srv.latency)
                    text = srv.policy(body)
                finally:
                    with srv._lock: srv.inflight -= 1
                self._send(200, {'id': 'x', 'object': 'chat.completion', 'created': int(time.time()), 'model': body['model'],
                                 'choices': [{'index': 0, 'message': {'role': 'assistant', 'content': text}, 'finish_reason': 'stop'}],
                                 'usage': {'prompt_tokens': 100, 'completion_tokens': len(text.split()), 'total_tokens': 100 + len(text.split())}})
            def _send(self, code, obj): send_once(self, code, json.dumps(obj).encode())
        self.httpd = Server(('127.0.0.1', 0), H)
        self.httpd.handle_error = lambda request, address: None   # clients killed mid-request are expected here
        self.url = f'http://127.0.0.1:{self.httpd.server_address[1]}/v1'
    def __enter__(self):
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True); self.thread.start(); return self
    def __exit__(self, *a):
        self.httpd.shutdown(); self.httpd.server_close()

class Task:
    "A minimal task"
    def __init__(self, id='A-01', app='Counter', instruction='Click + until the counter shows 3, then answer with the number.', steps=8):
        self.id, self.app, self.instruction, self.steps = id, app, instruction, steps
