"""Both message builders against a line-by-line transcription of CODA's reference code (OpenIXCLab/CODA,
ScienceBoard_CODA/sci/base/agent.py `dump_payload` and community.py `AllInOne.__call__`), field by field, for
histories of every length up to past the 31-message window."""
import copy
import pytest
from coda.prompts import Conversation, user_turn, split_planner, PLANNER_PROMPT_ANS, UITARS15_COMPUTER_PROMPT

# ---- the reference, transcribed (messages as dicts: role + list of parts) ----
def ref_dump_payload(system, context):
    payload = copy.deepcopy([system, *context[-31:]])          # self._Agent__dump(31), deep-copied
    for i in reversed(range(len(payload) - 4)):                # delete user turns outside the last 4 messages
        if payload[i]['role'] == 'user': del payload[i]
    if payload[-1]['role'] == 'user':
        task = system['content'][0]['text'].split('User Instruction\n')[1]
        payload[-1]['content'].append({'type': 'text', 'text': 'Task: ' + task})
    return payload

def ref_executor_payload(system, context):
    task = system['content'][0]['text'].split('User Instruction\n')[1]
    payload = ref_dump_payload(system, context)
    payload[0]['role'] = 'user'
    payload[0]['content'][0]['text'] = UITARS15_COMPUTER_PROMPT.format(instruction=task, language='English')
    thought = payload[-1]['content'][0]['text'].split('\nAction')[0].strip('\n').strip()
    payload[-1]['content'][0]['text'] = thought + '\nAction: '
    return payload, thought

def ref_system(instruction):
    return {'role': 'system', 'content': [{'type': 'text', 'text': PLANNER_PROMPT_ANS.format(language='English', instruction=instruction).strip()}]}

def planner_reply(t): return f"Thought: step {t}: open the Edit menu.\nAction: click(start_box='({t},{t + 1})')"

INSTRUCTIONS = ['Compute the determinant of [[1,2],[3,4]] in KAlgebra.', '  Show the Sun from Mars on May 28, 2150.  \n']

@pytest.mark.parametrize('instruction', INSTRUCTIONS)
@pytest.mark.parametrize('steps', [1, 2, 3, 5, 15, 16, 17, 30])
def test_planner_and_executor_payloads_match_reference(instruction, steps):
    ours = Conversation(instruction)
    ref_ctx, system = [], ref_system(instruction)
    for t in range(steps):
        u = user_turn(f'img{t}'.encode())
        ours.add_user(u); ref_ctx.append(copy.deepcopy(u))
        assert ours.planner_messages() == ref_dump_payload(system, ref_ctx), f'planner payload at step {t}'
        text = planner_reply(t)
        ours.add_assistant(text); ref_ctx.append({'role': 'assistant', 'content': [{'type': 'text', 'text': text}]})
        thought, _ = split_planner(text)
        ref_payload, ref_thought = ref_executor_payload(system, ref_ctx)
        assert thought == ref_thought
        assert ours.executor_messages(thought) == ref_payload, f'executor payload at step {t}'
        executed = f"click(start_box='({t},{t})')"
        ours.set_last_assistant(f'{thought}\nAction: {executed}')
        ref_ctx[-1]['content'][0]['text'] = f'{ref_thought}\nAction: {executed}'   # self.mono.context[-1].content[0].text = response
    assert ours.context == ref_ctx

def test_images_only_for_previous_and_current_step():
    c = Conversation('x')
    for t in range(6):
        c.add_user(user_turn(f'img{t}'.encode())); c.add_assistant(planner_reply(t))
    c.add_user(user_turn(b'img6'))
    imgs = [p['image'] for m in c.planner_messages() for p in m['content'] if p['type'] == 'image']
    assert imgs == [b'img5', b'img6']

def test_payloads_share_images_instead_of_copying():
    "The reference deep-copies every screenshot twice a step; ours passes the same objects"
    c = Conversation('x'); img = bytearray(b'big image')
    c.add_user(user_turn(bytes(img)))
    assert c.planner_messages()[-1]['content'][1]['image'] is c.context[-1]['content'][1]['image']
