"Screenshots encoded once, in the environment, incrementally: valid PNGs with exactly the frame's pixels; data URLs built once per frame"
import base64, io, pickle, random, struct, threading, zlib
import pytest
from PIL import Image, ImageDraw
from coda.envs.core import Observation

def decoded(png:bytes)->bytes: return Image.open(io.BytesIO(png)).convert('RGB').tobytes()

def strict_decode(png:bytes)->bytes:
    "The PNG's filtered rows, checking the signature, every chunk's CRC, and the zlib stream (header, end, Adler-32)"
    assert png[:8] == b'\x89PNG\r\n\x1a\n'
    i, idat, kinds = 8, [], []
    while i < len(png):
        n, = struct.unpack('>I', png[i:i + 4]); kind, data = png[i + 4:i + 8], png[i + 8:i + 8 + n]
        assert struct.unpack('>I', png[i + 8 + n:i + 12 + n])[0] == zlib.crc32(data, zlib.crc32(kind)), kind
        kinds.append(kind); idat += [data] if kind == b'IDAT' else []; i += 12 + n
    assert kinds[0] == b'IHDR' and kinds[-1] == b'IEND' and i == len(png)
    d = zlib.decompressobj(); raw = d.decompress(b''.join(idat))
    assert d.eof and not d.unused_data   # the stream is complete and its Adler-32 matched (zlib checks it)
    return raw

def test_frames_of_every_scidesk_app_decode_exactly():
    "Each app replays oracles; every frame is encoded by the app's own encoder and decodes to exactly what was drawn"
    from coda.envs.scidesk import APPS, SciDesk, scidesk_tasks, oracle_actions
    with SciDesk() as env:
        for app in APPS:
            tasks = [t for t in scidesk_tasks([app]) if t.extra.get('oracle')][:2]
            for t in tasks:
                obs = env.reset(t)
                for st in t.extra['oracle'] + [None]:
                    assert obs.encoder is env.app.encoder
                    png = obs.png()
                    assert decoded(png) == obs.screenshot.tobytes()
                    strict_decode(png)
                    if st is not None: obs = env.step(oracle_actions(st, obs))
            assert env.app.encoder.stats['bands'] < env.app.encoder.stats['frames'] * 50   # bands kept between frames

def test_random_frames_sizes_and_modes():
    "Noise, odd sizes, band edges, single-pixel and single-channel changes, RGBA/L/P inputs: always the input's RGB pixels"
    from coda.envs.core import FrameEncoder
    rng = random.Random(1)
    for band in (1, 7, 16):
        enc = FrameEncoder(band=band)
        for size in [(1, 1), (3, 17), (1281, 5), (40, 16), (40, 33), (97, 64)]:
            img = Image.frombytes('RGB', size, rng.randbytes(size[0] * size[1] * 3))
            assert decoded(enc(img)) == img.tobytes()
            for _ in range(12):
                img = img.copy()
                x, y = rng.randrange(size[0]), rng.randrange(size[1])
                r, g, b = img.getpixel((x, y))
                img.putpixel((x, y), rng.choice([(r ^ 1, g, b), (r, g ^ 1, b), (r, g, b ^ 1)]))   # one bit of one channel
                if rng.random() < 0.5:
                    xs, ys = sorted(rng.randrange(size[0]) for _ in 'ab'), sorted(rng.randrange(size[1]) for _ in 'ab')
                    ImageDraw.Draw(img).rectangle((xs[0], ys[0], xs[1], ys[1]), fill=tuple(rng.randrange(256) for _ in range(3)))
                png = enc(img)
                assert decoded(png) == img.tobytes()
                strict_decode(png)
    enc = FrameEncoder()
    for mode in ('RGBA', 'L', 'P', '1', 'LA'):
        img = Image.frombytes('RGB', (50, 37), rng.randbytes(50 * 37 * 3)).convert(mode)
        assert decoded(enc(img)) == img.convert('RGB').tobytes(), mode

def test_only_changed_bands_are_deflated_again():
    from coda.envs.core import FrameEncoder
    enc, img = FrameEncoder(band=16), Image.new('RGB', (1280, 800), (240, 240, 243))
    enc(img); assert enc.stats['bands'] == 50
    nxt = img.copy(); ImageDraw.Draw(nxt).rectangle((10, 0, 20, 15), fill='red'); ImageDraw.Draw(nxt).rectangle((700, 790, 710, 799), fill='red')
    p = enc(nxt); assert enc.stats['bands'] == 52 and decoded(p) == nxt.tobytes()   # two far apart changes: two bands
    assert enc(nxt.copy()) is p and enc.stats['same'] == 1

def test_drawing_on_an_encoded_screenshot_does_not_corrupt_the_next_frame():
    from coda.envs.core import FrameEncoder
    enc, img = FrameEncoder(), Image.new('RGB', (200, 100), 'white')
    enc(img)
    ImageDraw.Draw(img).rectangle((0, 0, 50, 50), fill='black')   # someone marks up the screenshot they were given
    nxt = Image.new('RGB', (200, 100), 'white'); ImageDraw.Draw(nxt).rectangle((0, 0, 50, 50), fill='black')
    assert decoded(enc(nxt)) == nxt.tobytes()

def test_one_encoder_from_many_threads():
    from coda.envs.core import FrameEncoder
    enc, rng = FrameEncoder(), random.Random(2)
    imgs = [Image.frombytes('RGB', (64, 48), rng.randbytes(64 * 48 * 3)) for _ in range(4)]
    bad = []
    def work(i):
        for _ in range(30):
            if decoded(enc(imgs[i])) != imgs[i].tobytes(): bad.append(i)
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
    assert not bad

def test_encoding_waits_for_someone_to_ask():
    from coda.envs.scidesk import SciDesk, scidesk_tasks, oracle_actions
    with SciDesk() as env:
        t = next(t for t in scidesk_tasks(['Algebra']) if t.extra.get('oracle'))
        obs = env.reset(t)
        for st in t.extra['oracle']: obs = env.step(oracle_actions(st, obs))
        assert env.app.encoder.stats['frames'] == 0   # stepping alone encodes nothing
        obs.png(); obs.png(); assert env.app.encoder.stats['frames'] == 1

def test_frames_pickle_without_their_caches():
    "ProcessEnv and Ray send observations between processes: the PNG travels as PNG, the encoder without its 4 MB frame"
    from coda.envs.core import FrameEncoder, PNG
    enc, img = FrameEncoder(), Image.new('RGB', (300, 200), 'teal')
    o = Observation(img, encoder=enc); p = o.png(); p.data_url
    q = pickle.loads(pickle.dumps(p))
    assert type(q) is PNG and q == p and 'data_url' not in q.__dict__ and q.data_url == p.data_url
    o2 = pickle.loads(pickle.dumps(o))
    assert o2.encoder is not enc and o2.encoder._rows is None and o2.png() == p
    assert len(pickle.dumps(enc)) < 200

def test_a_frame_is_base64_encoded_once_across_requests(monkeypatch):
    "Nine concurrent episodes, each request sending its window of 15 past screenshots: each frame is base64-encoded once"
    from coda.models import OpenAIChat
    calls = []
    real = base64.b64encode
    monkeypatch.setattr(base64, 'b64encode', lambda b, *a: calls.append(len(b)) or real(b, *a))
    llm, eps = OpenAIChat('http://127.0.0.1:9/v1', 'm'), 9
    frames = {e: [] for e in range(eps)}
    for step in range(15):
        for e in range(eps):   # the episodes' requests interleave, as they do in a rollout
            frames[e].append(Observation(Image.new('RGB', (16, 16), (e, step, 0))).png())
            msgs = [{'role': 'user', 'content': [{'type': 'image', 'image': f}]} for f in frames[e]]
            body = llm.request_body(msgs)
            assert body['messages'][-1]['content'][0]['image_url']['url'].startswith('data:image/png;base64,')
    assert len(calls) == eps * 15

def test_desktop_observations_use_the_environments_encoder():
    from coda.envs.desktop import DesktopEnv
    class FakeDesktop:
        display = ':99'
        def screenshot(self): return Image.new('RGB', (1280, 800), 'gray')
    env = DesktopEnv(); env.desktop = FakeDesktop()
    o = env.observe()
    assert o.encoder is env.encoder and decoded(o.png()) == o.screenshot.tobytes() and env.encoder.stats['frames'] == 1

def _solving_models(task):
    "A planner that answers the Algebra task at once (an in-process chat backend)"
    from coda.models import Reply
    ans = task.evaluate[0]['args'][0]
    class Solver:
        async def chat(self, messages, **kw): return Reply(f'Thought: done.\nAction: ANS {ans}', 1, 1, 0.0, 1, 'solver', 'local')
    return Solver()

@pytest.mark.parametrize('obs,store,encodes', [('a11y', False, False), ('a11y', True, True), ('screenshot', False, True)])
def test_an_agent_encodes_screenshots_only_for_whoever_reads_them(tmp_path, obs, store, encodes):
    "An accessibility-tree agent without a run folder sends no image anywhere: no frame is encoded"
    from coda.agent import Agent, AgentConfig
    from coda.aio import run_sync
    from coda.envs.scidesk import SciDesk, scidesk_tasks
    from coda.store import EpisodeWriter
    t = next(t for t in scidesk_tasks(['Algebra']) if t.evaluate and t.evaluate[0].get('args'))
    m = _solving_models(t)
    with SciDesk() as env:
        w = EpisodeWriter(tmp_path/'ep', {}) if store else None
        res = run_sync(Agent(m, m, AgentConfig(obs=obs)).run(env, t, on_step=w and w.add_step, on_final=w and w.add_final))
        assert res['status'] == 'done', res
        assert (env.app.encoder.stats['frames'] > 0) == encodes
        if store: assert (tmp_path/'ep'/'step_000.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'

def test_observations_from_worker_processes_are_not_decoded_unless_read():
    "ProcessEnv and Ray observations arrive as PNG: the agent sends it on as it came; the image is decoded only when read"
    from coda.rollout import _to_wire, _from_wire
    from coda.envs.scidesk import SciDesk, scidesk_tasks
    with SciDesk() as env: o = env.reset(scidesk_tasks(['GIS'])[0])
    w = _from_wire(pickle.loads(pickle.dumps(_to_wire(o))))
    assert w.has_screenshot and w.png() == o.png() and w.digest() == o.digest()
    assert getattr(w, '_img', None) is None
    assert w.screenshot.tobytes() == o.screenshot.tobytes()

def test_clients_share_one_tls_context(monkeypatch):
    "Building a TLS context reads the CA bundle (tens of ms on the event loop): one per process, not one per client"
    import asyncio, httpx
    from coda import models
    made = []
    real = httpx.create_ssl_context
    monkeypatch.setattr(httpx, 'create_ssl_context', lambda *a, **k: made.append(1) or real(*a, **k))
    models._tls_context.cache_clear()
    async def open_session(llm): await llm._session(); await llm.aclose()
    for i in range(5): asyncio.run(open_session(models.OpenAIChat(f'http://127.0.0.1:{9 + i}/v1', 'm')))
    assert len(made) == 1
