"""The miniature's demonstrations: every scidesk task's oracle, said by the oracle planner and grounded by the
accessibility-tree executor, through the real agent loop and the trajectory store, passes its checker; checker
labels become judgments the training stages read."""
import time
from coda.envs.scidesk import scidesk_tasks
from coda.judge import judge_labels
from coda.store import read_episode
from coda.metrics import judge_prf
from coda.mini.oracle import record_demonstrations, OraclePlanner
from coda.judge import checker_judgments
from coda.grpo import build_grpo_dataset

def test_every_oracle_through_the_agent(tmp_path):
    tasks = scidesk_tasks()
    t0 = time.perf_counter()
    res = record_demonstrations(tasks, tmp_path/'demos', workers=4)
    assert len(res) == len(tasks) == 155
    failed = [(r['app'], r['task'], r['stop'], r.get('reason')) for r in res if r['score'] != 1.0]
    assert failed == [], failed
    assert checker_judgments(tmp_path/'demos') == 155
    y_true, y_pred = judge_labels(tmp_path/'demos', 'checker')
    assert judge_prf(y_true, y_pred)['precision'] == 1.0 and judge_prf(y_true, y_pred)['recall'] == 1.0
    ds = build_grpo_dataset(tmp_path/'demos', 'checker', apps=['Algebra'])
    assert len(ds) >= 33
    print(f"155 demonstrations in {time.perf_counter() - t0:.1f} s")

def test_oracle_planner_unknown_task_gives_up():
    from coda.aio import run_sync
    r = run_sync(OraclePlanner([]).chat([{'role': 'system', 'content': '## User Instruction\nDo something else.'}]))
    assert r.text.endswith('FAIL')

def test_seed_demonstrations_bootstrap_a_planner_with_coda_train_sft(tiny, tmp_path):
    "Demonstrations -> checker judgments -> `coda train sft --merge` -> the merged planner answers through LocalChat"
    import subprocess, sys
    from pathlib import Path
    from coda.models import LocalChat
    from coda.aio import run_sync
    from coda.records import replay
    record_demonstrations(scidesk_tasks(split='seed'), tmp_path/'demos')
    checker_judgments(tmp_path/'demos')
    exe = Path(sys.executable).parent/'coda'
    cmd = [str(exe)] if exe.exists() else [sys.executable, '-c', 'from coda.cli import main; main()']
    p = subprocess.run(cmd + ['train', 'sft', '--runs', str(tmp_path/'demos'), '--judge', 'checker', '--model', str(tiny),
                              '--out', str(tmp_path/'gen'), '--max-steps', '2', '--merge'], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path/'gen'/'merged'/'config.json').exists() and 'rows' in p.stdout
    ep = next((tmp_path/'demos'/'episodes').glob('*/*/0'))
    r = run_sync(LocalChat(tmp_path/'gen'/'merged').chat(replay(read_episode(ep), 0).planner_messages(), max_tokens=8))
    assert isinstance(r.text, str) and r.completion_tokens <= 8
