"""`coda.export`: a run's steps and episodes as `datasets` with the screenshots inside (the parquet files alone decode
them once the run folder is gone), a folder `load_dataset` reads offline, the judges' labels joined to the right
episode and step, damaged and unfinished episodes handled, model text kept as text; and the TRL views."""
import io, json, shutil, socket
from pathlib import Path
import pytest
from PIL import Image
import datasets
import coda.export
from needs import caught
from coda.store import RunStore, file_judgment, judge_names, judgment_path, safe_name
from coda.files import atomic_write
from coda.records import Judgment, Labels
from coda.export import steps_dataset, episodes_dataset, export_run, sft_dataset, grpo_dataset, run_fingerprint, SHARD, steps_features

def png(w:int, h:int)->bytes:
    b = io.BytesIO()
    Image.new('RGB', (w, h), (w % 256, h % 256, 7)).save(b, 'PNG')
    return b.getvalue()

def episode(st:RunStore, task:str, sample:int, sizes:list, score=1.0, final=(16, 10), finish=True, steps=None, instruction='Compute 2+2.'):
    "An episode with one step per size in `sizes` (a PNG of that size each); `steps` overrides the step records"
    w = st.start('Algebra', task, sample, {'instruction': instruction})
    for i, wh in enumerate(sizes):
        rec = (steps or [{}] * len(sizes))[i]
        w.add_step({'step': i, 'thought': f'thought {i}', 'planner': f'Thought: thought {i}\nAction: click', 'executor': f"click(start_box='({i},{i})')",
                    'kind': 'act', 'actions': [{'kind': 'click', 'x': i, 'y': i}], **rec}, png(*wh) if wh else None)
    if final: w.add_final(png(*final))
    if finish: w.finish({'status': 'done', 'stop': 'ANS', 'score': score, 'steps': len(sizes), 'seconds': 2.0})
    else: w.abandon()
    return st.episode_dir('Algebra', task, sample)

def judge(run, name, key, accepted, positives, clean=None, verdict=None):
    labels = Labels(positives, None, accepted if clean is None else clean)
    j = Judgment(key=tuple(key), judge=name, accepted=accepted, label=int(accepted), labels=labels, status='done', verdict=verdict)
    file_judgment(run, j, fsync=False)

@pytest.fixture
def run(tmp_path):
    "Two finished episodes (steps of distinct sizes), one unfinished; judged by 'coda' (both finished) and 'solo' (the first)"
    root = tmp_path/'run'
    st = RunStore(root, {'screen': [64, 40]}, fsync=False)
    episode(st, 'A-01', 0, [(64, 40), (48, 30), (40, 24)], 1.0)
    episode(st, 'A-01', 1, [(32, 20), (24, 16)], 0.0, final=None)
    episode(st, 'A-02', 0, [(20, 12)], finish=False)
    judge(root, 'coda', ('Algebra', 'A-01', 0), True, [0, 1, 2], verdict={'correct': True})
    judge(root, 'coda', ('Algebra', 'A-01', 1), False, [0])
    judge(root, 'solo', ('Algebra', 'A-01', 0), False, [1], clean=False)
    return root

@pytest.fixture
def offline(monkeypatch):
    "No network: any connection attempt fails the test"
    def refuse(*a, **k): raise AssertionError(f'network access attempted: {a}')
    monkeypatch.setattr(socket.socket, 'connect', refuse)
    monkeypatch.setattr(socket, 'create_connection', refuse)
    monkeypatch.setattr(datasets.config, 'HF_HUB_OFFLINE', True)

# ------------------------------------------------------------------ images embedded
@pytest.mark.parametrize('short', [True, False])
def test_parquet_alone_decodes_the_screenshots(run, tmp_path, monkeypatch, short):
    if not short: monkeypatch.setattr(coda.export, 'IN_MEMORY', 2)
    out = export_run(run, tmp_path/'out')
    shutil.rmtree(run)
    steps = datasets.Dataset.from_parquet(str(out/'data'/'steps'/SHARD), cache_dir=str(tmp_path/'c'))
    assert [im.size for im in steps['image']] == [(64, 40), (48, 30), (40, 24), (32, 20), (24, 16)]
    raw = steps.cast_column('image', datasets.Image(decode=False))[0]['image']
    assert raw['bytes'] == png(64, 40) and raw['path'] == 'episodes/Algebra/A-01/0/step_000.png'
    eps = datasets.Dataset.from_parquet(str(out/'data'/'episodes'/SHARD), cache_dir=str(tmp_path/'c'))
    assert eps['final'][0].size == (16, 10) and eps['final'][1] is None

def test_save_to_disk_carries_the_images(run, tmp_path):
    steps_dataset(run, cache_dir=str(tmp_path/'c')).save_to_disk(str(tmp_path/'saved'))
    shutil.rmtree(run)
    shutil.rmtree(tmp_path/'c', ignore_errors=True)
    assert datasets.load_from_disk(str(tmp_path/'saved'))[4]['image'].size == (24, 16)

# ------------------------------------------------------------------ the folder load_dataset reads
def test_load_dataset_round_trip_offline(run, tmp_path, offline):
    direct = {c: f(run, cache_dir=str(tmp_path/'c')) for c, f in (('steps', steps_dataset), ('episodes', episodes_dataset))}
    out = export_run(run, tmp_path/'out')
    shutil.rmtree(run)
    for c, ds in direct.items():
        back = datasets.load_dataset(str(out), c, split='train', cache_dir=str(tmp_path/'lc'))
        assert back.features == ds.features, c
        keep = [k for k in ds.column_names if k not in ('image', 'final')]
        assert back.select_columns(keep).to_list() == ds.select_columns(keep).to_list(), c
    assert len(datasets.load_dataset(str(out), split='train', cache_dir=str(tmp_path/'lc'))) == 5   # steps is the default config
    card = (out/'README.md').read_text()
    assert 'config_name: steps' in card and 'config_name: episodes' in card and 'upload' in card

def test_export_again_replaces_and_leaves_no_temporary_files(run, tmp_path):
    out = export_run(run, tmp_path/'out')
    (out/'data'/'steps'/'train-00000-of-00002.parquet').write_bytes(b'old shard')
    RunStore(run).discard('Algebra', 'A-01', 1)
    export_run(run, out)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob('*') if p.is_file()) == \
        ['README.md', f'data/episodes/{SHARD}', f'data/steps/{SHARD}']
    assert len(datasets.Dataset.from_parquet(str(out/'data'/'steps'/SHARD), cache_dir=str(tmp_path/'c'))) == 3

@pytest.fixture
def long(monkeypatch):
    "Tables longer than 2 rows built the long way (Arrow files written batch by batch)"
    monkeypatch.setattr(coda.export, 'IN_MEMORY', 2)

def test_long_tables_go_through_arrow_files(run, tmp_path, long):
    s = steps_dataset(run, cache_dir=str(tmp_path/'c'))
    assert len(s.cache_files) == 1 and Path(s.cache_files[0]['filename']).is_relative_to(tmp_path/'c')
    assert [im.size for im in s['image']] == [(64, 40), (48, 30), (40, 24), (32, 20), (24, 16)]
    assert steps_dataset(run, cache_dir=str(tmp_path/'c')).cache_files == s.cache_files     # an unchanged run: the cache
    assert len(coda.export.steps_dataset(run, judges=[], cache_dir=str(tmp_path/'c')).column_names) == 15

def test_a_changed_run_is_read_again_not_served_from_the_cache(run, tmp_path, long):
    c = str(tmp_path/'c')
    fp = run_fingerprint(run)
    assert steps_dataset(run, cache_dir=c)['judge_coda_accepted'] == [True] * 3 + [False] * 2
    judge(run, 'coda', ('Algebra', 'A-01', 1), True, [0, 1])
    assert run_fingerprint(run) != fp
    assert steps_dataset(run, cache_dir=c)['judge_coda_accepted'] == [True] * 5
    assert steps_dataset(run, cache_dir=c)['judge_coda_positive'] == [True] * 5
    assert not list((Path(c)).rglob('*.tmp*'))

# ------------------------------------------------------------------ labels
def test_labels_joined_to_their_episode_and_step(run, tmp_path):
    assert judge_names(run) == ['coda', 'solo']
    s = steps_dataset(run, cache_dir=str(tmp_path/'c'))
    assert [(r['sample'], r['step'], r['judge_coda_accepted'], r['judge_coda_positive'], r['judge_solo_accepted'], r['judge_solo_positive'])
            for r in s.select_columns([k for k in s.column_names if k != 'image']).to_list()] == \
        [(0, 0, True, True, False, False), (0, 1, True, True, False, True), (0, 2, True, True, False, False),
         (1, 0, False, True, None, None), (1, 1, False, False, None, None)]
    e = episodes_dataset(run, cache_dir=str(tmp_path/'c'))
    assert e['judge_coda_positives'] == [[0, 1, 2], [0]] and e['judge_coda_clean_success'] == [True, False]
    assert e['judge_solo_accepted'] == [False, None] and e['judge_coda_verdict'] == ['{"correct": true}', None]
    assert e['judge_coda_label'] == [1, 0]
    only = steps_dataset(run, judges=['solo'], cache_dir=str(tmp_path/'c'))
    assert [k for k in only.column_names if k.startswith('judge_')] == ['judge_solo_accepted', 'judge_solo_positive']

def test_a_judge_filed_under_an_escaped_folder_is_exported_by_its_name(run, tmp_path):
    "A judge named 'qwen/72b' is filed under judgments/qwen%2F72b: listed by its real name, its decisions read and joined"
    judge(run, 'qwen/72b', ('Algebra', 'A-01', 1), True, [1])
    assert safe_name('qwen/72b') == 'qwen%2F72b' and (run/'judgments'/'qwen%2F72b').is_dir()
    assert judge_names(run) == ['coda', 'qwen/72b', 'solo']
    s = steps_dataset(run, cache_dir=str(tmp_path/'c'))
    assert s['judge_qwen%2F72b_accepted'] == [None, None, None, True, True] and s['judge_qwen%2F72b_positive'] == [None, None, None, False, True]
    e = episodes_dataset(run, cache_dir=str(tmp_path/'c'))
    assert e['judge_qwen%2F72b_positives'] == [None, [1]] and e['judge_coda_positives'] == [[0, 1, 2], [0]]
    out = export_run(run, tmp_path/'out')
    assert '`qwen/72b`' in (out/'README.md').read_text()
    got = datasets.load_dataset('parquet', data_files=str(out/'data'/'episodes'/SHARD), split='train', cache_dir=str(tmp_path/'hf'))
    assert got['judge_qwen%2F72b_accepted'] == [None, True]

def test_a_judgment_that_spells_the_sample_as_text_still_joins(run, tmp_path):
    p = judgment_path(run, 'text', ('Algebra', 'A-01', 1))
    p.parent.mkdir(parents=True)
    atomic_write(p, json.dumps(dict(key=['Algebra', 'A-01', '1'], judge='text', accepted=True, label=1,
                                    labels=dict(positives=[1], negative=None, clean_success=True))).encode(), fsync=False)
    e = episodes_dataset(run, judges=['text'], cache_dir=str(tmp_path/'c'))
    assert e['judge_text_accepted'] == [None, True]

# ------------------------------------------------------------------ unfinished and damaged
def test_unfinished_and_damaged_episodes(run, tmp_path):
    st = RunStore(run)
    (st.episode_dir('Algebra', 'A-01', 1)/'result.json').write_text('{"status": "do')     # damaged: counts as unfinished
    d = episode(st, 'A-03', 0, [(8, 8), (8, 8), None])                                    # a broken PNG, a hostile name, no screenshot
    (d/'step_000.png').write_bytes(b'\x89PNG\r\n\x1a\n broken')
    lines = [json.loads(l) for l in (d/'steps.jsonl').read_text().splitlines()]
    lines[1]['screenshot'] = '../../../../../secret.png'
    (run.parent/'secret.png').write_bytes(png(9, 9))
    (d/'steps.jsonl').write_text(''.join(json.dumps(l) + '\n' for l in lines))
    (st.episode_dir('Algebra', 'A-02', 0)/'meta.json').write_text('{"app": ')              # unreadable meta: the episode is skipped
    s, msgs = caught(lambda: steps_dataset(run, finished_only=False, cache_dir=str(tmp_path/'c')))
    assert list(zip(s['task'], s['sample'])) == [('A-01', 0)] * 3 + [('A-01', 1)] * 2 + [('A-03', 0)] * 3
    assert s['image'][5:] == [None, None, None] and s['image'][3].size == (32, 20)
    assert any('step_000.png: not a readable image' in m for m in msgs) and any('meta.json' in m for m in msgs)
    e, _ = caught(lambda: episodes_dataset(run, finished_only=False, cache_dir=str(tmp_path/'c')))
    assert e['finished'] == [True, False, True] and e['result'][1] is None and 'result.json' in e['damage'][1][0]
    assert e['score'] == [1.0, None, 1.0] and e['n_steps'] == [3, 2, 3]
    f, _ = caught(lambda: steps_dataset(run, cache_dir=str(tmp_path/'c')))
    assert list(zip(f['task'], f['sample'])) == [('A-01', 0)] * 3 + [('A-03', 0)] * 3

def test_an_empty_run_exports_empty_tables_with_their_columns(tmp_path):
    "datasets cannot load a split without rows: the files still hold the columns (and their features), with a warning"
    import pyarrow.parquet as pq
    RunStore(tmp_path/'run', {}, fsync=False)
    out, msgs = caught(lambda: export_run(tmp_path/'run', tmp_path/'out'))
    assert sum('no steps to export' in m or 'no episodes to export' in m for m in msgs) == 2
    t = pq.read_table(out/'data'/'episodes'/SHARD)
    assert t.num_rows == 0 and 'final' in t.column_names and b'"final": {"_type": "Image"}' in t.schema.metadata[b'huggingface']
    assert steps_dataset(tmp_path/'run', cache_dir=str(tmp_path/'c')).features == steps_features()

# ------------------------------------------------------------------ untrusted text
HOSTILE = ['{"kind": "click", "x": 1}', '<img src=x onerror=alert(1)>', "---\nconfigs: []\n---", 'x\ud83d']

def test_model_text_stays_text(tmp_path, offline):
    st = RunStore(tmp_path/'run', {}, fsync=False)
    steps = [{'thought': t, 'planner': t, 'executor': t, 'error': t, 'kind': t} for t in HOSTILE]
    steps += [{'thought': {'not': 'a string'}, 'actions': 'not a list', 'step': 'seven'}]
    d = episode(st, 'A-01', 0, [(8, 8)] * 5, steps=steps, instruction=HOSTILE[2])
    lines = (d/'steps.jsonl').read_text().splitlines()      # the writer cleans what it writes; a file from elsewhere may not be clean
    (d/'steps.jsonl').write_text('\n'.join(lines[:3] + [lines[3].replace('\ufffd', '\\ud83d')] + lines[4:]) + '\n')
    assert '"x\\ud83d"' in (d/'steps.jsonl').read_text()
    out = export_run(tmp_path/'run', tmp_path/'out')
    s = datasets.load_dataset(str(out), 'steps', split='train', cache_dir=str(tmp_path/'lc'))
    want = HOSTILE[:3] + ['x\ufffd']
    assert s['thought'] == want + ['{"not": "a string"}'] and s['planner'][:4] == want and s['executor'][:4] == want
    assert s['error'][:4] == want and s['kind'][:4] == want and s['instruction'] == [HOSTILE[2]] * 5
    assert s['actions'][4] == '[]' and s['step'] == [0, 1, 2, 3, None]
    assert all(isinstance(v, str) for v in s['actions'])
    assert datasets.load_dataset(str(out), 'episodes', split='train', cache_dir=str(tmp_path/'lc'))['thoughts'][0][:4] == want
    assert (out/'README.md').read_text().count('config_name:') == 2

# ------------------------------------------------------------------ TRL views
def test_sft_rows_are_the_labelled_turns(run, tmp_path):
    s = sft_dataset(run, 'coda', dedup=False)
    assert list(zip(s['sample'], s['step'], s['source'])) == [(0, 0, 'clean'), (0, 1, 'clean'), (0, 2, 'clean'), (1, 0, 'prefix')]
    assert s[2]['messages'][-1] == {'role': 'assistant', 'content': [{'type': 'text', 'text': 'Thought: thought 2\nAction: click'}]}
    assert sum(p['type'] == 'image' for m in s[2]['messages'] for p in m['content']) == len(s[2]['images'])
    assert s[2]['images'][-1].size == (40, 24)
    assert len(sft_dataset(run, 'coda', positive_prefixes=False, dedup=False)) == 3
    c = sft_dataset(run, dedup=False)                       # the checkers: A-01 #0 passed, #1 failed, A-02 unfinished
    assert list(zip(c['sample'], c['step'])) == [(0, 0), (0, 1), (0, 2)] and 'checker' in judge_names(run)

def test_grpo_rows_are_the_positive_steps(run):
    g = grpo_dataset(run, 'solo')
    assert list(zip(g['sample'], g['step'])) == [(0, 1)] and json.loads(g['gold'][0]) == [{'kind': 'click', 'x': 1, 'y': 1}]
    assert g[0]['images'][-1].size == (48, 30)
