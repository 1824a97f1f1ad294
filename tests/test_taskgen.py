"""coda.taskgen: parsing teacher replies, de-duplication, checkable scidesk tasks, and generation end to end
against a real HTTP server (scripted replies) and against the tiny served Qwen2.5-VL (garbage replies)."""
import asyncio, json, socket
import pytest
from agent_fixtures import ScriptedServer
from coda.envs.scidesk import SciDesk, scidesk_tasks, oracle_actions
from coda.models import ModelError, OpenAIChat
from coda.tasks import Task, load_tasks
from coda.taskgen import (parse_tasks, read_json, dedup_tasks, similarity, normalise, task_id, to_task, match_template,
                          make_checkable, checkable_tasks, generate_tasks, save_tasks, taskgen_messages, opening_screenshot,
                          TEMPLATES, DEFAULT_STEPS, MAX_LEN)

SEEDS = scidesk_tasks(['Algebra'], split='seed')
TASKS = [{'instruction': 'Store 7 in a variable named z.', 'steps': 5},
         {'instruction': 'Plot y = 3x - 2 in the 2D graph.', 'steps': 6},
         {'instruction': 'Set the precision to 2 decimal places.', 'steps': 5}]
GOOD = json.dumps({'tasks': TASKS})
WANT = [{**t, 'app': 'Algebra'} for t in TASKS]

# ------------------------------------------------------------------ parsing

@pytest.mark.parametrize('text', [
    GOOD,
    '```json\n' + GOOD + '\n```',
    'Here are the new tasks for the agent:\n\n```\n' + GOOD + '\n```\n\nThese cover variables, plots and settings.',
    'Sure. ' + GOOD + '\nNote: {steps} are estimates.',
    GOOD.replace('"', "'"),                                   # a Python literal, read by ast.literal_eval
    json.dumps(TASKS),                                        # a bare list of objects
])
def test_realistic_replies_parse(text):
    assert parse_tasks(text, 'Algebra') == (WANT, [])

def test_bare_list_of_instructions_gets_default_steps():
    recs, why = parse_tasks('["Switch the angle mode to degrees.", "Turn off the grid of the 2D graph."]', 'Algebra')
    assert [r['steps'] for r in recs] == [DEFAULT_STEPS] * 2 and why == []
    assert parse_tasks('["Turn off the grid."]', 'Algebra', max_steps=5)[0][0]['steps'] == 5

@pytest.mark.parametrize('text', ['', '   ', 'I am sorry, I cannot propose tasks.', '{"tasks": [{"instruction": "Plot y = x"',
                                  '{"tasks": "plot things"}', '{"exam": []}', 'null', '42', '[]', '{"tasks": []}',
                                  '```json\n{tasks: [plot]}\n```', '[' * 10_000, '{"a": ' * 3000, "__import__('os').system('true')"])
def test_malformed_replies_give_reasons_never_exceptions(text):
    recs, why = parse_tasks(text, 'Algebra')
    assert recs == [] and why and all(isinstance(w, str) for w in why)

def test_never_evaluates_code():
    assert read_json("{'tasks': [__import__('os').getcwd()]}") is None

def test_wrong_types_and_bounds():
    items = [{'instruction': 17}, {'instruction': None}, ['Plot y = x.'], {'instruction': 'Plot y = x^3.', 'steps': 'many'},
             {'instruction': 'Plot y = x^4.', 'steps': -2}, {'instruction': 'Plot y = x^5.', 'steps': False},
             {'instruction': 'Plot y = x^6.', 'steps': 7.0}, {'instruction': 'Plot y = x^7.', 'steps': '8'},
             {'instruction': 'Plot y = x^8.', 'steps': 40}, {'instruction': 'x' * (MAX_LEN + 1)}, {'instruction': 'Plot'},
             {'instruction': 'Plot y = x^9.', 'app': 'GIS'}, {'instruction': '  Plot   y = x^10\n in the graph. '}]
    recs, why = parse_tasks(json.dumps({'tasks': items}), 'Algebra')
    assert recs == [{'instruction': 'Plot y = x^6.', 'steps': 7, 'app': 'Algebra'},
                    {'instruction': 'Plot y = x^7.', 'steps': 8, 'app': 'Algebra'},
                    {'instruction': 'Plot y = x^8.', 'steps': 15, 'app': 'Algebra', 'clamped': 40},   # too big: clamped
                    {'instruction': 'Plot y = x^10 in the graph.', 'steps': DEFAULT_STEPS, 'app': 'Algebra'}]
    assert len(why) == 9
    assert any('task 4: steps -2 is below 1' == w for w in why) and any(f'{MAX_LEN + 1} characters' in w for w in why)
    assert any("for app 'GIS'" in w for w in why) and any('task 2: a list' in w for w in why)

def test_unknown_app_is_a_caller_error():
    with pytest.raises(ValueError, match='unknown app'): parse_tasks(GOOD, 'Notepad')

# ------------------------------------------------------------------ de-duplication

def test_duplicates_of_seeds_and_within_the_batch():
    props = [{'instruction': 'Switch the angle mode of Algebra to degrees!'},            # a seed, re-punctuated
             {'instruction': "Switch Algebra's angle mode to degrees."},                  # a seed, reworded
             {'instruction': 'Store 12 factorial in a variable named f.'},                # a seed without "in Algebra"
             {'instruction': 'Store 7 in a variable named z.'},
             {'instruction': 'store the number 7 in a variable called z'},               # near-duplicate of the previous
             {'instruction': 'Store 8 in a variable named z.'},                           # other number: a different task
             {'instruction': 'Plot y = x^2 + 1 in the 2D graph.'}]
    kept, dropped = dedup_tasks(props, SEEDS, app='Algebra')
    assert [k['instruction'] for k in kept] == ['Store 7 in a variable named z.', 'Store 8 in a variable named z.', 'Plot y = x^2 + 1 in the 2D graph.']
    assert [w.split(' of ')[1].split(' ')[0] for _, w in dropped] == ['known', 'known', 'known', 'earlier']

def test_similarity_properties():
    assert similarity('Set the precision to 3 decimal places.', 'Set the precision to 4 decimal places.') == 0.0
    assert similarity('Hide Mercury in Astronomy.', 'Hide Venus in Astronomy.', 'Astronomy') < 0.75
    assert similarity('Show the equatorial grid.', 'Show the ecliptic grid.') < 0.75
    assert similarity('Go to Mars and follow it.', 'Follow Mars after going to it') < 1.0
    assert normalise('Set x to 2.5.') == 'set x to 2.5'

# ------------------------------------------------------------------ tasks, checkable tasks, files

def test_task_ids_are_stable_and_tasks_unchecked():
    t = to_task({'instruction': 'Store 7 in a variable named z.', 'steps': 5, 'app': 'Algebra'})
    assert t.id == task_id('Algebra', 'STORE 7 in a variable named z') and t.id.startswith('G-Algebra-') and len(t.id) == len('G-Algebra-') + 10
    assert (t.split, t.evaluate, t.steps) == ('generated', [], 5)
    assert task_id('Algebra', 'Store 7 in z.') != task_id('Algebra', 'Store 8 in z.')

def _gen(app, ins): return to_task({'instruction': ins, 'steps': 8, 'app': app})

def test_checkable_algebra_var_by_typing_like_an_agent():
    t, why = make_checkable(_gen('Algebra', 'Set the variable w to -2.5 in Algebra.'))
    assert why == '' and t.extra['template'] == 'algebra-var'
    assert t.evaluate == [{'type': 'state', 'check': ['and', ['has', ['$', 'vars'], 'w'], ['close', ['$', 'vars', 'w'], -2.5, 1e-6]]}]
    with SciDesk(render=False) as env:
        obs = env.reset(t)
        assert env.evaluate() == 0.0                                        # not solved on the fresh app
        for st in [['click', 'Expression'], ['type', 'w := 5 - 7.5\n']]:    # a plausible agent, not the template's own oracle
            obs = env.step(oracle_actions(st, obs))
        assert env.evaluate() == 1.0
        obs = env.reset(t)
        for st in [['click', 'Expression'], ['type', 'w := 2.5\n']]: obs = env.step(oracle_actions(st, obs))
        assert env.evaluate() == 0.0                                        # a wrong value fails

def test_every_template_builds_a_check_false_fresh_and_true_after_its_actions():
    examples = {'algebra-var': ('Algebra', 'Store 42 in a variable named k.'), 'algebra-angle': ('Algebra', 'Switch the angle mode to degrees.'),
                'algebra-precision': ('Algebra', 'Make the console show 2 decimal places.'),
                'astronomy-magnitude': ('Astronomy', 'Set the limiting magnitude to 6.5.'),
                'astronomy-jd': ('Astronomy', 'Set the simulation time to Julian date 2451600 in Astronomy.'),
                'biochem-fetch': ('Biochem', 'Open 1BKX.'), 'gis-scale': ('GIS', 'Set the map scale to 1:5000000.')}
    assert set(examples) == {t.name for t in TEMPLATES}
    with SciDesk(render=False) as env:
        for name, (app, ins) in examples.items():
            t, why = make_checkable(_gen(app, ins))
            assert t is not None and t.extra['template'] == name, (name, why)
            env.reset(t); assert env.evaluate() == 0.0, name
            obs = env.reset(t)
            for st in t.extra['oracle']: obs = env.step(oracle_actions(st, obs))
            assert env.evaluate() == 1.0, name

def test_what_stays_unchecked_and_why():
    tasks = [_gen('Algebra', 'Switch the angle mode to radians.'),             # the default already
             _gen('Algebra', 'Set the variable a to 7 and then the variable b to the square of a.'),   # more than the template
             _gen('Algebra', 'Plot y = x^2.'),                                   # no template
             _gen('Biochem', 'Fetch the structure 9XYZ from the PDB.'),         # not in the offline bundle
             _gen('KAlgebra', 'Store 7 in a variable named z.')]                # not a scidesk app
    out, why = checkable_tasks(tasks)
    assert [t.evaluate for t in out] == [[]] * 5 and out == tasks
    assert [why[t.id] for t in tasks] == ['algebra-angle: already true on the fresh app', 'no template matches the whole instruction',
                                          'no template matches the whole instruction',
                                          "biochem-fetch: the template's actions do not satisfy the check", 'KAlgebra is not a scidesk app']
    assert match_template('Algebra', 'Store 7 in a variable named z and plot it.') is None

def test_save_and_load_round_trip(tmp_path):
    tasks, _ = checkable_tasks([_gen('Algebra', 'Store 7 in a variable named z.'), _gen('Algebra', 'Plot y = 3x - 2.'), _gen('GIS', 'Zoom in twice on the map.')])
    paths = save_tasks(tasks, tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in paths) == sorted(f'{t.app}/{t.id}.json' for t in tasks)
    back = load_tasks(tmp_path)
    assert {t.id: t.to_dict() for t in back} == {t.id: t.to_dict() for t in tasks}
    assert len(load_tasks(tmp_path, split='generated')) == 3 and sum(bool(t.evaluate) for t in back) == 1

# ------------------------------------------------------------------ generation over real HTTP

def test_messages_carry_prompt_and_screenshot():
    shot = opening_screenshot('Algebra')
    m = taskgen_messages('Algebra', shot, SEEDS + ['x'] * 40, n=7, max_steps=12)
    assert m[0]['content'][1] == {'type': 'image', 'image': shot} and shot.size == (1280, 800)
    text = m[0]['content'][0]['text']
    assert 'Propose 7 new tasks' in text and '5 to 12' in text and text.count('\n- ') == 31 and '(and 15 more)' in text

def test_generate_tasks_end_to_end_against_a_real_server(tmp_path):
    replies = ['```json\n' + json.dumps({'tasks': [*TASKS, {'instruction': 'Switch the angle mode of Algebra to degrees.', 'steps': 4},
                                                  {'instruction': 'ok', 'steps': 3}]}) + '\n```',
               'Sure, more tasks: ' + json.dumps({'tasks': [{'instruction': 'Store the number 7 in a variable called z.', 'steps': 5},
                                                          {'instruction': 'Turn off the grid of the 2D graph in Algebra.', 'steps': 4}]})]
    def policy(body):
        return replies[min(len(srv.requests), len(replies)) - 1]
    with ScriptedServer(policy) as srv:
        llm = OpenAIChat(srv.url, 'teacher', timeout=10)
        tasks, rep = asyncio.run(generate_tasks(llm, 'Algebra', SEEDS, opening_screenshot('Algebra'), n=5, rounds=2))
    assert [t.instruction for t in tasks] == [t['instruction'] for t in TASKS] + ['Turn off the grid of the 2D graph in Algebra.']
    assert (rep.rounds, rep.unreadable, rep.proposed, rep.invalid, rep.duplicates, rep.kept, rep.checkable) == (2, 0, 7, 1, 2, 4, 2)
    assert {t.extra.get('template') for t in tasks} == {'algebra-var', 'algebra-precision', None}
    body = srv.requests[0]
    assert body['model'] == 'teacher' and body['temperature'] == 1.0 and body['max_tokens'] == 2048
    parts = body['messages'][0]['content']
    assert parts[1]['image_url']['url'].startswith('data:image/png;base64,') and 'Store 12 factorial' in parts[0]['text']
    assert '- Store 7 in a variable named z.' in srv.requests[1]['messages'][0]['content'][0]['text']
    save_tasks(tasks, tmp_path)
    assert len(load_tasks(tmp_path)) == 4

def _dead_url():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
    return f'http://127.0.0.1:{port}/v1'

def test_model_error_names_the_endpoint():
    url = _dead_url()
    with pytest.raises(ModelError, match=url.replace('.', r'\.')):
        asyncio.run(generate_tasks(OpenAIChat(url, 'teacher', retries=0, timeout=5), 'Algebra', SEEDS, None))

def test_a_later_round_failing_keeps_earlier_tasks():
    def policy(body):
        if len(srv.requests) > 1: raise RuntimeError('boom')   # the server drops the connection
        return GOOD
    with ScriptedServer(policy) as srv:
        tasks, rep = asyncio.run(generate_tasks(OpenAIChat(srv.url, 'teacher', retries=0, timeout=10), 'Algebra', SEEDS, None, rounds=3))
    assert len(tasks) == 3 and rep.rounds == 1 and len(rep.errors) == 1 and srv.url in rep.errors[0]

def test_tiny_served_model_garbage_is_handled(served, tiny):
    shot = opening_screenshot('Algebra').resize((320, 200))
    llm = OpenAIChat(served, str(tiny), timeout=120)
    tasks, rep = asyncio.run(generate_tasks(llm, 'Algebra', SEEDS, shot, n=3, max_tokens=24))
    assert rep.rounds == 1 and rep.reasons and rep.kept == len(tasks) and rep.proposed == rep.invalid + rep.duplicates + rep.kept
    assert rep.unreadable or rep.invalid   # random weights: nothing sensible comes back
    print(rep.summary(), rep.reasons)

# ------------------------------------------------------------------ the stage: an app's tasks into a folder, and `coda generate`

from coda.taskgen import generate_app_tasks, add_generate_args, run_generate_command, opening_screen, task_list

STAGE = [{'instruction': 'Switch the angle mode of Algebra to degrees.', 'steps': 4},     # a seed, reworded: dropped
         {'instruction': 'Store 7 in a variable named z.', 'steps': 5},                   # a template: a checker
         {'instruction': 'Plot y = 3x - 2 in the 2D graph.', 'steps': 6},                 # no template: evaluate []
         {'instruction': 'ok', 'steps': 3},                                               # invalid
         {'instruction': 'Set the precision to 2 decimal places.', 'steps': 5},           # a template
         {'instruction': 'Hide the grid of the 2D graph.', 'steps': 4}]                   # an avoided task, reworded: dropped
KEPT = {'Store 7 in a variable named z.': True, 'Plot y = 3x - 2 in the 2D graph.': False, 'Set the precision to 2 decimal places.': True}

def _held_out(folder):
    save_tasks([to_task({'instruction': 'Hide the grid of the 2D graph in Algebra.', 'steps': 4, 'app': 'Algebra'})], folder)
    return folder

def test_generate_app_tasks_writes_task_files_and_resumes_without_asking_again(tmp_path):
    avoid = _held_out(tmp_path/'held-out')
    more = json.dumps([{'instruction': 'Store the number 7 in a variable called z.', 'steps': 5}, {'instruction': 'Set the variable w to 3.', 'steps': 5}])
    replies, shots = [json.dumps(STAGE), more], []
    def shot():
        shots.append(1)
        return opening_screenshot('Algebra')
    async def stage(n, rounds):
        llm = OpenAIChat(srv.url, 'teacher', timeout=10)
        try: return await generate_app_tasks(llm, 'Algebra', tmp_path/'gen', SEEDS, [avoid], shot, n=n, rounds=rounds)
        finally: await llm.aclose()
    with ScriptedServer(lambda body: replies[min(len(srv.requests), len(replies)) - 1]) as srv:
        tasks, rep = asyncio.run(stage(3, 1))
        assert len(srv.requests) == 1 and srv.requests[0]['messages'][0]['content'][1]['image_url']['url'].startswith('data:image/png;base64,')
        assert 'Hide the grid' not in srv.requests[0]['messages'][0]['content'][0]['text']             # avoided tasks are never shown
        assert (rep.proposed, rep.invalid, rep.duplicates, rep.kept, rep.checkable, rep.existing) == (6, 1, 2, 3, 2, 0)
        files = sorted((tmp_path/'gen'/'Algebra').glob('*.json'))
        assert [f.stem for f in files] == sorted(t.id for t in tasks)
        for f in files:                                                       # ScienceBoard's task-file format
            d = json.loads(f.read_text())
            assert {'type', 'id', 'sort', 'steps', 'instruction', 'initialize', 'evaluate', 'ans', 'split'} <= set(d)
            assert (d['type'], d['split'], d['initialize'], bool(d['evaluate'])) == ('Algebra', 'generated', [], KEPT[d['instruction']])
        back = load_tasks(tmp_path/'gen')
        assert {t.instruction: bool(t.evaluate) for t in back} == KEPT and [t.to_dict() for t in back] == [t.to_dict() for t in tasks]

        again, rep2 = asyncio.run(stage(3, 1))                                # enough there: no request
        assert len(srv.requests) == 1 and (rep2.rounds, rep2.existing, rep2.kept) == (0, 3, 0) and [t.id for t in again] == [t.id for t in tasks]

        grown, rep3 = asyncio.run(stage(3, 2))                                # six wanted: one more round
        assert len(srv.requests) == 2 and (rep3.rounds, rep3.existing, rep3.duplicates, rep3.kept) == (1, 3, 1, 1)
        assert '- Store 7 in a variable named z.' in srv.requests[1]['messages'][0]['content'][0]['text']   # the folder's tasks are known
        assert len(grown) == 4 and len(load_tasks(tmp_path/'gen')) == 4 and 'Set the variable w to 3.' in {t.instruction for t in grown}
        assert len(shots) == 2                                                # the screen is made only when the teacher is asked

def test_task_list_reads_folders_and_keeps_one_app(tmp_path):
    folder = _held_out(tmp_path/'held-out')
    save_tasks([to_task({'instruction': 'Zoom in twice on the map.', 'steps': 4, 'app': 'GIS'})], folder)
    assert [t.instruction for t in task_list([folder], 'GIS')] == ['Zoom in twice on the map.']
    assert task_list([folder, 'Plot y = x.', SEEDS[0], str(folder)], 'Algebra')[1:3] == ['Plot y = x.', SEEDS[0]]

def test_opening_screen_of_scidesk_and_of_another_environment():
    assert opening_screen('Astronomy').size == (1280, 800)
    assert opening_screen('Counter', env='agent_fixtures:CounterEnv').size == (1280, 800)   # make_env's module:callable, reset on a bare task

def test_run_generate_command_through_argparse(tmp_path, capsys):
    import argparse
    avoid = _held_out(tmp_path/'held-out')
    test_task = scidesk_tasks(['Algebra'], split='test')[0]
    def policy(body):
        text = body['messages'][0]['content'][0]['text']
        if '"Algebra"' in text: return json.dumps(STAGE + [{'instruction': test_task.instruction, 'steps': 8}])   # a test task: dropped
        return '```json\n' + json.dumps(['Open 1BKX.', 'Color the protein by chain.']) + '\n```'
    ap = add_generate_args(argparse.ArgumentParser(prog='coda generate'))
    argv = ['--app', 'Algebra', '--app', 'Biochem', '--teacher-model', 'teacher', '--n', '2', '--out', str(tmp_path/'gen'), '--avoid', str(avoid),
            '--max-steps', '12']
    with ScriptedServer(policy) as srv:
        a = ap.parse_args(argv + ['--teacher-url', srv.url])
        assert (a.screenshot, a.env, a.rounds, a.temperature, a.max_tokens, a.seeds) == ('opening', 'scidesk', 1, 1.0, 2048, None)
        got = run_generate_command(a)
        assert len(srv.requests) == 2
        again = run_generate_command(a)                                                       # resumed: nothing asked
        assert [t.to_dict() for t in again['Algebra'][0]] == [t.to_dict() for t in got['Algebra'][0]] and len(srv.requests) == 2
    out = capsys.readouterr().out
    assert 'Algebra: 1 round(s), 0 unreadable, 7 proposed, 1 invalid, 3 duplicates, 3 kept (2 checkable)' in out
    assert f"3 task file(s) of Algebra in {tmp_path/'gen'/'Algebra'} (3 new, 2 with a checker)" in out and 'Biochem: 2 already there' in out
    alg = srv.requests[0]
    text = alg['messages'][0]['content'][0]['text']
    assert 'Store 12 factorial' in text and test_task.instruction not in text and 'Propose 2 new tasks' in text and '5 to 12' in text
    assert alg['messages'][0]['content'][1]['type'] == 'image_url' and alg['temperature'] == 1.0 and alg['max_tokens'] == 2048
    assert len(load_tasks(tmp_path/'gen', split='generated')) == 5
    assert [bool(t.evaluate) for t in got['Biochem'][0] if t.instruction == 'Open 1BKX.'] == [True]
    for bad in (['--seeds', str(tmp_path/'nowhere')], ['--app', 'Notepad']):
        with pytest.raises(SystemExit): run_generate_command(ap.parse_args(argv + ['--teacher-url', 'http://127.0.0.1:9/v1'] + bad))
