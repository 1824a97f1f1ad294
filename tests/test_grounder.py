"""The accessibility-tree grounder as the executor in the real agent loop: a planner served over HTTP says each
oracle step's thought, the grounder turns it into UI-TARS actions, scidesk's checkers score the episodes."""
import pytest
from agent_fixtures import ScriptedServer
from coda.agent import Agent, AgentConfig
from coda.aio import run_sync
from coda.envs.scidesk import SciDesk, scidesk_tasks
from coda.mini.grounder import A11yGrounder, step_thought
from coda.models import OpenAIChat

def planner_policy(task):
    steps = task.extra['oracle']
    def policy(body):
        i = sum(m['role'] == 'assistant' for m in body['messages'])
        st = steps[i] if i < len(steps) else ['done']          # an oracle may end without a 'done' step
        if st[0] == 'answer': return f"Thought: {step_thought(st)}\nAction: ```ANS {st[1]}```"
        if st[0] == 'fail': return f"Thought: {step_thought(st)}\nAction: FAIL"
        return f"Thought: {step_thought(st)}\nAction: (for the executor)"
    return policy

@pytest.mark.parametrize('app', ['Algebra', 'Biochem', 'GIS', 'Astronomy'])
def test_agent_with_grounder_solves_tasks(app):
    tasks = scidesk_tasks([app], split='test')[:3]
    for task in tasks:
        with ScriptedServer(planner_policy(task)) as srv:
            async def go():
                p = OpenAIChat(srv.url, 'planner')
                try: return await Agent(p, A11yGrounder(), AgentConfig(obs='both', stuck_after=50)).run(SciDesk(), task)
                finally: await p.aclose()
            res = run_sync(go())
        assert res['score'] == 1.0, (app, task.id, res)
