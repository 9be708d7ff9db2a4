"""Build conv-*.jsonl from rows_src.py. Deterministic."""
import json, sys, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rows_src import ROWS
import os
TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 4, 'shared', 'data', 'urho3d', 'topics')
SKIP = {3973: 'first post is only a code snippet ("the temp should be null?"), problem not restatable'}
SHAPES = ['new_topic', 'reply_mention', 'short_direct', 'follow_up']

def accepted_ids():
    out = []
    for f in os.listdir(TOP):
        if not f.endswith('.json'): continue
        d = json.load(open(os.path.join(TOP, f)))
        if any(p.get('accepted_answer') for p in d['post_stream']['posts']):
            out.append(int(f[:-5]))
    return sorted(out)

def select(ids, k=120):
    n = len(ids); base = [ids[(i * n) // k] for i in range(k)]
    sel = []
    for i, t in enumerate(base):
        j = ids.index(t)
        while ids[j] in SKIP or ids[j] in sel or (ids[j] != t and ids[j] in base):
            j += 1
        sel.append(ids[j])
    return sel

def is_fr(i):
    return i % 7 == 2 or i == 119

if __name__ == '__main__':
    ids = accepted_ids()
    sel = select(ids)
    assert [r[0] for r in ROWS] == sel, 'rows do not match selection'
    rows = []
    for i, (tid, title, thread, q) in enumerate(ROWS):
        shape = SHAPES[i % 4]
        d = json.load(open(f'{TOP}/{tid}.json'))
        ps = d['post_stream']['posts']
        first = [p['id'] for p in ps if p['post_number'] == 1]
        gold = [p['id'] for p in ps if p.get('accepted_answer')]
        assert gold and first
        # shape consistency
        if shape == 'new_topic': assert title and not thread
        if shape == 'reply_mention': assert title and thread and 1 <= len(thread) <= 2
        if shape == 'short_direct':
            assert not title and not thread
            nw = len([w for w in q.split() if w != '@citebot'])
            assert 5 <= nw <= 15, (tid, nw)
        if shape == 'follow_up': assert not title and thread and thread[-1] == '(bot answer)'
        assert '@citebot' in q, tid
        row = {'id': f'conv-{i+1:03d}', 'shape': shape}
        if title: row['title'] = title
        if thread: row['thread'] = thread
        row.update({'question': q, 'gold_topic_ids': [tid], 'gold_post_ids': gold,
                    'exclude_post_ids': first, 'tags': ['fr' if is_fr(i) else 'en', shape]})
        rows.append(row)
    out = os.path.dirname(os.path.abspath(__file__))
    with open(f'{out}/conv-untouched.jsonl', 'w') as fu, open(f'{out}/conv-dev.jsonl', 'w') as fd:
        for r in rows:
            (fu if int(r['id'][5:]) % 3 == 0 else fd).write(json.dumps(r, ensure_ascii=False) + '\n')
    from collections import Counter
    print('total', len(rows))
    print('shape x lang', sorted(Counter((r['shape'], r['tags'][0]) for r in rows).items()))
    print('lang', Counter(r['tags'][0] for r in rows))
    print('untouched', sum(1 for r in rows if int(r['id'][5:]) % 3 == 0), 'dev', sum(1 for r in rows if int(r['id'][5:]) % 3))
