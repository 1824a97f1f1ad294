"""`coda pipeline` at a smoke size (params/smoke.yaml: params/mini.yaml made small) through everything a GPU run goes
through: models served over HTTP on 127.0.0.1 by coda's own server, training under `accelerate launch` with two
processes, every stage recorded in pipeline.json; killed once mid-stage (SIGKILL) and resumed to the tables. Also:
the paper config's plan, a row whose model is not served, a changed config, and the library never importing coda.mini."""
import ast, json, os, shutil, signal, socket, subprocess, sys, time
from pathlib import Path
import pandas as pd
import pytest
from coda.paths import PARAMS, ROOT

CODA = [sys.executable, '-m', 'coda']

def _pipeline(run, *extra, **kw):
    return [*CODA, 'pipeline', '--config', str(PARAMS/'smoke.yaml'), '--run', str(run), '--quiet', '--set', f'tables.out={run}/figures', *extra]

def _stages(run):
    p = Path(run)/'pipeline.json'
    try: return json.loads(p.read_text())['stages'] if p.exists() else {}
    except json.JSONDecodeError: return {}

def _port_open(url):
    host, port = url.split('//')[1].split('/')[0].split(':')
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) == 0

def test_smoke_pipeline_killed_mid_stage_resumes_to_the_tables(tmp_path):
    run = tmp_path/'run'
    p = subprocess.Popen(_pipeline(run), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0, killed_in = time.time(), None
    while time.time() - t0 < 900:                                        # kill it once exploration has episodes on disk
        st = _stages(run).get('explore_baseline', {})
        if st.get('status') == 'running' and len(list((run/'explore'/'baseline').glob('episodes/*/*/*/result.json'))) >= 2:
            p.send_signal(signal.SIGKILL)
            killed_in = 'explore_baseline'
            break
        if p.poll() is not None: break
        time.sleep(0.2)
    out = p.communicate()[0]
    assert killed_in, out[-3000:]
    server = _stages(run)['explore_baseline']['models']['executor']['url']
    time.sleep(3)
    assert not _port_open(server), 'the server outlived the killed pipeline'      # children die with it (PR_SET_PDEATHSIG)
    before = {n: s['seconds'] for n, s in _stages(run).items() if s.get('status') == 'done'}
    assert 'prepare_bootstrap' in before and 'explore_baseline' not in before
    episodes = {p.relative_to(run) for p in (run/'explore'/'baseline').glob('episodes/*/*/*/result.json')}

    r = subprocess.run(_pipeline(run), capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    stages = _stages(run)
    assert all(s['status'] == 'done' for s in stages.values()), {n: s['status'] for n, s in stages.items()}
    assert {n: stages[n]['seconds'] for n in before} == before                    # finished stages were reused, not redone
    assert episodes <= {p.relative_to(run) for p in (run/'explore'/'baseline').glob('episodes/*/*/*/result.json')}
    assert 'done before' in r.stdout and 'reused' in r.stdout

    rec = json.loads((run/'pipeline.json').read_text())                          # what pipeline.json records
    launched = [n for n, s in stages.items() if s.get('commands')]
    assert {'prepare_bootstrap', 'prepare_judge', 'judge_train'} <= set(launched)
    assert all('accelerate.commands.launch' in s['commands'][0] and '--num_processes' in s['commands'][0] for n, s in stages.items() if s.get('commands'))
    grpo = [n for n in stages if n.startswith('stage1_') and stages[n]['outputs'].get('model')]
    assert grpo, 'no specialist was trained: the smoke config must give Stage 1 positive steps'
    for n in grpo:
        assert stages[n]['outputs']['steps'] >= 1 and Path(stages[n]['outputs']['model'], 'config.json').exists()
        assert 'train grpo' in ' '.join(stages[n]['commands'][0]) and stages[n]['models']['executor']['url'].startswith('http://127.0.0.1:')
    assert json.loads((run/'models'/'baseline'/'sft.json').read_text())['processes'] == 2   # two training processes on CPU
    ev = stages['eval_heldout_stage1_checker']['outputs']['planners']                    # each app with its own specialist
    trained = {n.split('_')[1] for n in grpo if n.endswith('_checker')}
    assert {a for a, name in ev.items() if name != 'baseline'} == trained and all(ev[a] == f'stage1-{a}-checker' for a in trained)
    assert rec['peak_gib'] > 0 and rec['seconds'] > 0

    t1 = pd.read_csv(run/'figures'/'table1.csv')                                 # the tables, from the records
    assert list(t1['row'].unique()) == ['baseline', 'stage1', 'stage2']
    assert t1[t1['app'] == 'Algebra']['paper (ScienceBoard) Pass@8'].tolist() == [29.03, 41.94, 48.39]
    assert (t1[t1['app'].isin(['Algebra', 'Astronomy'])]['episodes'] == 2).all()  # 1 test task x 2 samples per app
    h = pd.read_csv(run/'figures'/'table1_heldout.csv')
    assert list(h['row'].unique()) == ['baseline', 'stage1', 'stage2', 'stage1_checker', 'stage2_checker', 'stage2_replay']
    pairs = pd.read_csv(run/'figures'/'table1_heldout_paired.csv')                # paired differences between the rows
    assert {'stage1 - baseline', 'stage2 - stage1', 'stage2 - stage2_replay'} <= set(pairs['comparison']) and (pairs['low'] <= pairs['high']).all()
    sel = stages['judge_select']['outputs']                                       # the labelling judge, chosen on the baseline's exploration
    assert sel['chosen'] in sel['scores'] and set(sel['scores']) == set(t2_rows := ['single', 'voting@4', 'voting@4 + multi-resolution', 'finetuned', 'ensemble'])
    assert stages['judge_baseline']['outputs']['row'] == sel['chosen'] and stages['judge_baseline']['outputs']['copied'] > 0
    assert sel['positives'] in ('prefix', 'accepted') and set(sel['step_scores'][sel['chosen']]) == {'prefix', 'accepted'}   # and its step labels
    assert all(f"--positives {sel['positives']}" in ' '.join(stages[n]['commands'][0]) for n in grpo)
    sl = pd.read_csv(run/'figures'/'table2_step_labels.csv')
    assert set(sl['positives']) == {'prefix', 'accepted'} and sl['chosen'].sum() == 1
    per_app = [c for c in sl.columns if c.endswith(' steps')]
    assert (sl[per_app].fillna(0).sum(axis=1) == sl['steps']).all()               # each row's steps, app by app
    md = (run/'figures'/'table2.md').read_text()
    assert all(f"| {x['judge']} | {x['positives']} | {x['steps']} | {x['precision']:.1f} | {x['recall']:.1f} | "
               + ' | '.join(str(int(x[c])) if pd.notna(x[c]) else '0' for c in per_app) + ' |' in md for _, x in sl.iterrows())
    assert "what Stage 1 trains on" in (run/'figures'/'table2.md').read_text() and set(t2_rows) <= set(pd.read_csv(run/'figures'/'table2_exploration.csv', index_col=0).index)
    t2 = pd.read_csv(run/'figures'/'table2.csv', index_col=0)
    assert list(t2.index) == ['single', 'finetuned', 'voting@4', 'voting@4 + multi-resolution', 'ensemble']
    assert (t2.loc['single', 'Paper ScienceBoard P'], t2.loc['single', 'Paper ARB P']) == (41.5, 64.5)
    assert json.loads((run/'figures'/'table1_run.json').read_text())['config'] == 'params/smoke.yaml'   # not the clone's folder
    for f in ('table1.md', 'table1_apps.png', 'table1_grpo.png', 'table1_pipeline.png', 'table2.md', 'table2_pr.png'):
        assert (run/'figures'/f).stat().st_size > 0, f

    r = subprocess.run(_pipeline(run, '--set', 'seed=1'), capture_output=True, text=True, timeout=120)   # another config: refused
    assert r.returncode != 0 and "changed: ['seed']" in r.stderr

def test_paper_plan_is_complete_and_runs_nothing(tmp_path):
    r = subprocess.run([*CODA, 'pipeline', '--config', str(PARAMS/'paper.yaml'), '--dry-run', '--run', str(tmp_path/'paper')],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    plan = r.stdout
    for stage in ('generate', 'explore_baseline', 'judge_train', 'judge_baseline', 'stage1_KAlgebra', 'stage1_GrassGIS', 'explore_stage1',
                  'judge_stage1', 'stage2', 'eval_test_baseline', 'eval_test_stage1', 'eval_test_stage2', 'table2', 'tables'):
        assert f'] {stage}' in plan, stage
    assert 'vllm serve Qwen/Qwen2.5-VL-32B-Instruct --served-model-name baseline' in plan
    assert 'CUDA_VISIBLE_DEVICES=4,5,6,7 ' in plan and '--config_file' in plan and 'train grpo --app KAlgebra' in plan
    assert plan.rstrip().endswith('-> figures/paper')                     # paper-scale tables never over the miniature's figures/
    assert not (tmp_path/'paper').exists()

def test_a_model_that_is_not_served_fails_its_stage_loudly(tmp_path):
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        dead = s.getsockname()[1]
    run = tmp_path/'run'
    r = subprocess.run([*CODA, 'pipeline', '--config', str(PARAMS/'smoke.yaml'), '--run', str(run), '--quiet', '--set', 'prepare=""',
                        '--set', f'models.planner={{url: "http://127.0.0.1:{dead}/v1", name: baseline}}', '--set', 'models.teacher=null'],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and f'127.0.0.1:{dead}' in r.stderr and 'is the server running' in r.stderr
    st = _stages(run)['explore_baseline']
    assert st['status'] == 'failed' and f'127.0.0.1:{dead}' in st['error']

def test_no_library_module_imports_the_miniature():
    "coda.mini is named by configs, loaded by dotted name; nothing outside it imports it"
    bad = []
    for f in (ROOT/'coda').rglob('*.py'):
        if 'mini' in f.relative_to(ROOT/'coda').parts: continue
        for node in ast.walk(ast.parse(f.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ''] if isinstance(node, ast.ImportFrom) else []
            if isinstance(node, ast.ImportFrom) and node.level: names = ['coda.' + (node.module or '') if node.level == 1 else node.module or '']
            bad += [f'{f.name}: {n}' for n in names if n.startswith(('coda.mini', 'mini'))]
    assert not bad, bad

def test_paper_config_runs_on_scienceboards_server_with_tiny_models_in_its_place(tmp_path, tiny):
    """params/paper.yaml as it is (ScienceBoard's task files in its VMs through `--env vm`, no train split, every task a test task,
    Table 2 on the baseline's evaluation, the plan's stages), with only what a CPU cannot hold swapped: tiny models on coda's own server
    instead of vLLM, two CPU processes instead of DeepSpeed, no judge training (no labelled trajectories here), small sizes, and for the
    VMs ScienceBoard's real in-VM server on this machine (provider local) with Debian's KAlgebra for ScienceBoard's fork"""
    from needs import need_programs
    from coda.procs import free_port
    from coda.paths import SHARED
    need_programs('Xvfb', 'xdotool', 'openbox', 'scrot', 'kalgebra')
    run, port = tmp_path/'paper', free_port()
    vm = (f'{{provider: local, port: {port}, item_pause: 0, settle: 0.3, setup_tries: 1, '
          f'rewrite: "LD_LIBRARY_PATH=/home/user/6.5.0/gcc_64/lib =>;/app/bin/kalgebra {port}=>kalgebra"}}')
    src = tmp_path/'tasks'/'KAlgebra'   # ScienceBoard's KAlgebra files whose set-up runs without the fork's server (launch, touch)
    src.mkdir(parents=True)
    for t in ('D-03', 'C-01'): shutil.copy(SHARED/'data'/'scienceboard'/'tasks'/'KAlgebra'/f'{t}.json', src)
    sets = [f'tasks.source={src.parent}', f'tasks.env_opts={vm}',f'models.planner={{path: "{tiny}"}}', 'models.executor={backend: coda.mini.grounder:A11yGrounder}',
            f'models.judge={{path: "{tiny}"}}', 'models.teacher={backend: coda.mini.teacher:TemplateTeacher}',
            'serving={kind: local}', 'launch={cpu: true, num_processes: 2}', 'judging.train=null', 'judging.max_tokens=8', 'judging.workers=2',
            'tasks.apps=[KAlgebra]', 'tasks.test_per_app=2', 'evaluation.test_samples=1', 'agent.workers=2', 'agent.retries=0',
            'agent.planner_sampling={temperature: 1.0, top_p: 0.9, max_tokens: 8}', 'agent.executor_sampling={temperature: 0.0, max_tokens: 8}',
            f'tables.out={tmp_path}/figures']
    r = subprocess.run([*CODA, 'pipeline', '--config', str(PARAMS/'paper.yaml'), '--run', str(run), '--quiet']
                       + [x for s in sets for x in ('--set', s)], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    stages = _stages(run)
    assert all(s['status'] == 'done' for s in stages.values()) and 'judge_train' not in stages
    assert stages['tasks']['outputs']['train'] == [] and len(stages['tasks']['outputs']['test']) == 2   # train_split: null
    assert stages['eval_test_stage1']['outputs']['planners'] == {'KAlgebra': 'baseline'}              # nothing to learn from: the baseline
    recs = [json.loads(p.read_text()) for p in (run/'eval'/'test'/'baseline'/'KAlgebra').glob('episodes/*/*/*/result.json')]
    assert len(recs) == 2 and all(r['status'] in ('done', 'error') for r in recs)                     # real KAlgebra episodes in the VM
    steps = list((run/'eval'/'test'/'baseline'/'KAlgebra').glob('episodes/*/*/*/steps.jsonl'))
    assert any(f.read_text().strip() for f in steps), 'no episode got to a step'          # not every one failed its set-up
    assert stages['table2']['outputs']['runs'] == [str(run/'eval'/'test'/'baseline'/'KAlgebra')]
    t1 = pd.read_csv(tmp_path/'figures'/'table1.csv')
    assert t1[t1['app'] == 'KAlgebra']['paper (ScienceBoard) Pass@8'].tolist() == [29.03, 41.94, 48.39]   # KAlgebra stands for Algebra
    assert (tmp_path/'figures'/'table2.md').exists()
