"""Print the selected topics (title, first post text, ids) that the rows were written from."""
import json, re, html, sys, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build import accepted_ids, select, TOP
def txt(c):
    c = re.sub(r'<pre.*?</pre>', ' [code] ', c, flags=re.S)
    c = re.sub(r'<aside.*?</aside>', ' ', c, flags=re.S)
    c = re.sub(r'<[^>]+>', ' ', c); return re.sub(r'\s+', ' ', html.unescape(c)).strip()
for t in select(accepted_ids()):
    d = json.load(open(f'{TOP}/{t}.json')); ps = d['post_stream']['posts']
    print(f"### {t} | {d['title']} | first={ps[0]['id']} acc={[p['id'] for p in ps if p.get('accepted_answer')]}")
    print(txt(ps[0]['cooked'])[:600])
