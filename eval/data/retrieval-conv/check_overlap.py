"""Find any run of N (default 5) consecutive words that a conv row shares with any
post of its gold topic (all posts, cooked HTML incl. code, converted to text).
Row text checked: title, thread posts (except the "(bot answer)" placeholder), question.
Words = lowercase [\\w']+ tokens (unicode aware); the "@citebot" mention is dropped.
Spans listed per topic in allow_pasted.json (pasted error strings / code) are cut out first.
Usage: python3 check_overlap.py [N] [files...]   exit code 1 if any hit."""
import json, re, html, sys, glob, os
import os
TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 4, 'shared', 'data', 'urho3d', 'topics')
N = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 5
files = [a for a in sys.argv[1:] if not a.isdigit()] or sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'conv-*.jsonl')))

def words(s):
    s = s.replace('\u2019', "'").replace('\u2018', "'").replace('@citebot', ' ')
    return re.findall(r"[\w']+", s.lower())

def text(cooked):
    c = re.sub(r'<[^>]+>', ' ', cooked)
    return html.unescape(c)

def grams(ws):
    return {tuple(ws[i:i + N]) for i in range(len(ws) - N + 1)}

ALLOW = {}
_ap = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'allow_pasted.json')
if os.path.exists(_ap):
    ALLOW = {k: v for k, v in json.load(open(_ap)).items() if not k.startswith('_')}

def strip_allowed(part, tid):
    n = 0
    for a in ALLOW.get(str(tid), []):
        if a.lower() in part.lower():
            i = part.lower().index(a.lower()); part = part[:i] + ' | ' + part[i + len(a):]; n += 1
    return part, n

hits = 0; nrows = 0; exempt = 0
for f in files:
    for line in open(f):
        r = json.loads(line); nrows += 1
        src = set()
        for t in r['gold_topic_ids']:
            d = json.load(open(f'{TOP}/{t}.json'))
            src |= grams(words(d.get('title', '')))  # title too
            for p in d['post_stream']['posts']:
                src |= grams(words(text(p['cooked'])))
        parts = [r.get('title', '')] + [x for x in r.get('thread', []) if x != '(bot answer)'] + [r['question']]
        for part in parts:
            part, k = strip_allowed(part, r['gold_topic_ids'][0]); exempt += k
            # runs never bridge an exempted span: check each remaining segment separately
            for seg in part.split(' | '):
                sw = words(seg)
                for i in range(len(sw) - N + 1):
                    g = tuple(sw[i:i + N])
                    if g in src:
                        hits += 1
                        print(f"{r['id']} topic={r['gold_topic_ids'][0]}: {' '.join(g)}")
print(f'pasted error/code spans exempted (allow_pasted.json): {exempt}')
print(f'checked {nrows} rows, {N}-word runs shared with topic posts: {hits}')
sys.exit(1 if hits else 0)
