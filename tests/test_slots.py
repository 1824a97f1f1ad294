"""Copy slots in the miniature's training stages: the planner's tokenizer texts, its GRPO prompts and the executor's
view of its completions (`coda.mini.slots` with `coda.pipeline`), on oracle demonstrations of generated tasks."""
import re
import coda.mini.grounder, coda.mini.slots
from coda.pipeline import MiniConfig, template_tasks, planner_texts, build_planner, train_specialist, train_planner
from coda.mini.oracle import record_demonstrations
from coda.judge import checker_judgments
from coda.mini.slots import slot_values

def _demos(tmp_path):
    tasks = template_tasks(['Algebra'], 3, seed=5, oracle=True)
    record_demonstrations(tasks, tmp_path/'demos', workers=1); checker_judgments(tmp_path/'demos')
    return tasks

def test_slot_planner_reads_and_trains_without_the_values(tmp_path, monkeypatch):
    tasks = _demos(tmp_path)
    values = {v for t in tasks for v in slot_values(t.instruction) if len(v) > 1}   # one-letter names occur in words
    texts = planner_texts([tmp_path/'demos'], tasks, slots=True)
    assert values and not any(v in t for t in texts for v in values if v.isdigit() and len(v) > 1) and any('<v0>' in t for t in texts)
    cfg = MiniConfig(run=str(tmp_path/'run'), hidden=32, layers=1, grpo_steps=1, grpo_generations=2, slots=True)
    build_planner(cfg, texts, tmp_path/'random')
    prompts, thoughts = [], []
    real = coda.mini.slots.delex_grpo_row
    monkeypatch.setattr(coda.mini.slots, 'delex_grpo_row', lambda row: prompts.append(r := real(row)) or r)
    class Watched(coda.mini.grounder.A11yGrounder):   # the frozen executor: what it reads of each sampled completion
        async def chat(self, messages, **kw):
            thoughts.append(str(messages[-1]['content'])); return await super().chat(messages, **kw)
    monkeypatch.setattr(coda.mini.grounder, 'A11yGrounder', Watched)
    scored, score = [], coda.mini.slots.SlotReward.score
    async def counted(self, completion, *a): scored.append(completion); return await score(self, completion, *a)
    monkeypatch.setattr(coda.mini.slots.SlotReward, 'score', counted)
    info = train_specialist(cfg, 'Algebra', [tmp_path/'demos'], 'checker', tmp_path/'random', tmp_path/'spec')
    assert info['examples'] == len(prompts) > 0 and info['executor_failures'] == 0, info
    seen = ' '.join(p['text'] or '' for r in prompts for m in r['prompt'] for p in m['content'])
    assert '<v0>' in seen and not any(v in seen for v in values if v.isdigit())
    assert len(scored) == cfg.grpo_generations and thoughts   # the slot reward scored every sampled completion
    assert not any(re.search(r'<v\d+>', t) for t in thoughts)  # and gave them their values back before the executor read them
    assert (tmp_path/'spec'/'model'/'config.json').exists()
    info = train_planner(cfg, [tmp_path/'demos'], 'checker', tmp_path/'random', tmp_path/'sft', steps=2, lr=1e-3)
    assert info['rows'] > 0 and (tmp_path/'sft'/'config.json').exists()
