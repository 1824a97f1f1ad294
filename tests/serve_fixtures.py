"""Chat backends and a codec for tests/test_serve.py. The server subprocess imports them by name
(`serve_fixtures:Echo`), so what a backend received comes back in its reply, as JSON."""
import asyncio, json
from coda.models import Reply

_PNG, _JPEG = b'\x89PNG\r\n\x1a\n', b'\xff\xd8\xff'

def _part(p:dict)->dict:
    "A content part as the backend saw it: its text, or the kind and size of its image bytes"
    if p.get('type') == 'image':
        img = p['image']
        kind = 'png' if img.startswith(_PNG) else 'jpeg' if img.startswith(_JPEG) else type(img).__name__
        return {'image': kind, 'bytes': len(img)}
    return {'text': p.get('text')}

class Echo:
    "A backend that replies with what it got: each message's role and parts, and the call's keyword arguments"
    def __init__(self, delay:float=0.0): self.delay = delay   # seconds each reply waits (concurrency tests)
    async def chat(self, messages:list, **kw)->Reply:
        if self.delay: await asyncio.sleep(self.delay)
        seen = [{'role': m['role'], 'content': m['content'] if isinstance(m['content'], str) else [_part(p) for p in m['content']]}
                for m in messages]
        return Reply(json.dumps({'messages': seen, 'kw': kw}), len(messages), None, self.delay, 1, 'echo', 'local:echo')

class Boom:
    "A backend that always fails"
    async def chat(self, messages:list, **kw)->Reply: raise RuntimeError('the GPU caught fire')

class UpperCodec:
    "A codec: the model reads upper case; a decoded reply ends with a marker"
    MARK = ' <decoded>'
    def encode(self, messages:list)->list:
        up = lambda p: {**p, 'text': p['text'].upper()} if p.get('type') == 'text' else p
        return [{**m, 'content': m['content'].upper() if isinstance(m['content'], str) else [up(p) for p in m['content']]} for m in messages]
    def decode(self, text:str, messages:list)->str: return text + self.MARK
