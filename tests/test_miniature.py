"""The miniature's demonstrations: every scidesk task's oracle, said by the oracle planner and grounded by the
accessibility-tree executor, through the real agent loop and the trajectory store, passes its checker; checker
labels become judgments the training stages read."""
import time
from coda.envs.scidesk import scidesk_tasks
from coda.judge import read_judgments, judge_labels
from coda.metrics import judge_prf
from coda.miniature import record_demonstrations, checker_judgments, OraclePlanner
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
    from coda.agent import run_sync
    r = run_sync(OraclePlanner([]).chat([{'role': 'system', 'content': '## User Instruction\nDo something else.'}]))
    assert r.text.endswith('FAIL')
