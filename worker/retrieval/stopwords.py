"""French and English stop-words, plus forum small talk: the one list.

Read by the keyword channel (``worker.retrieval.keyword``), by the reading of a member's question
(``worker.question``: does a reply name a subject) and by the offline answerer's sentence matching
(``worker.generation.offline``).

Discourse ANDs the terms of a search, so every word sent must be one the answer is likely to contain;
these never are distinctive. Accented and unaccented spellings are both listed (people type both).
"""

from __future__ import annotations


def _words(block: str) -> frozenset[str]:
    return frozenset(block.split())


ENGLISH = _words(
    """
    a about above after again against all also am an and any anyone anything are aren't as at be
    because been before being below between both but by can can't cannot could couldn't did didn't do
    does doesn't doing done don't down during each else even ever every few for from further get gets getting
    got had hadn't has hasn't have haven't having he her here hers herself him himself his how however i
    if in into is isn't it it's its itself just let like make makes many may me might more most much
    must my myself need needs no nor not now of off on once one only or other others our ours ourselves
    out over own really same shall she should shouldn't so some someone something still such than that
    that's the their theirs them themselves then there there's these they this those through thus to
    too under until up upon us use used using very via want wants was wasn't way we well were weren't
    what what's when where whether which while who whom whose why will with within without won't would
    wouldn't yet you your yours yourself yourselves
    hi hello hey thanks thank thx please pls regards cheers anybody somebody guys question questions
    help know think try tried trying work works working possible best good way ways thing things
    able etc ok okay yes also though already always around another seem seems
    """
)

FRENCH = _words(
    """
    a à ai aie aient aies ait alors as au aucun aucune aujourd aupres auprès aura aurai auraient aurais
    aurait auras aurez auriez aurions aurons auront autre autres aux avaient avais avait avant avec avez
    aviez avions avoir avons ayant ayez ayons bien c ça ca car ce ceci cela celle celles celui cependant
    certain certaine certains ces cet cette ceux chaque chez ci comme comment d dans de depuis des donc
    dont du elle elles en encore entre es est et étaient etaient étais etais était etait étant etant
    été ete êtes etes étiez etiez étions etions être etre eu eue eues eûmes eurent eus eusse eussent eut
    eux fait faire fais faut fois font furent fus fut ici il ils j je jusqu l la là le les leur leurs
    lors lorsque lui m ma mais me même meme mêmes memes mes moi moins mon n ne ni nos notre nous on ont
    ou où par parce pas peu peut peuvent peux plus pour pourquoi puis qu quand que quel quelle quelles
    quels qui quoi s sa sans se sera serai seraient serais serait seras serez seriez serions serons
    seront ses si sien soi soient sois soit sommes son sont sous suis sur t ta te tes toi ton tous tout
    toute toutes très tres tu un une unes uns vers via vos votre vous y
    bonjour bonsoir salut merci svp stp question questions aide aider besoin savoir sais sait voudrais
    veux veut pouvez pourriez quelqu quelque quelques chose choses truc marche fonctionne possible
    est-ce peut-être peut-etre a-t-il y-a-t-il dois-je puis-je faut-il
    """
)

STOP_WORDS = ENGLISH | FRENCH
