#!/usr/bin/env python3
"""Deterministic generator of TLR's fictional world and its CommonsenseQA-style questions.

The world: made-up things (names built from syllables) with three facts each -- where the
thing is found, what it is made of, what it is used for -- each fact taking one of twelve
single-word values. Questions ask for one fact, with five choices of the same kind, in the
Hugging Face flattened CommonsenseQA schema (id, question, question_concept, choices{label,
text}, answerKey), exactly as ../shared/datasets/commonsenseqa_dev.jsonl.

Splits: every fact is stated as a sentence in the training text; a fact's question goes to
exactly one of train / dev / test, so dev and test questions are never seen in training while
the knowledge they need is. The target answer states the fact, then the choice it decides:
  Answer: A zinthar is found in the marsh. So the answer is marsh.

  python3 tools/worldgen/worldgen.py --seed 7 --things 1500 --out DIR
writes DIR/world.json, DIR/train.jsonl, DIR/dev.jsonl, DIR/test.jsonl and DIR/corpus.txt (fact
sentences, descriptions stating each thing's facts in varied forms, and answered training
questions; every example ends with <|endoftext|>). With --partial F it also writes
DIR/corpus_partial.txt: the same text with facts about only a fraction F of the things (the
first in a seeded shuffle), for a small model that is meant to know less; world.json lists
which things it covers. With --drills N, DIR/drills.txt holds N questions about things outside
the world answered with a random choice (see drills()). Standard library only; the same seed gives byte-identical files.
"""
import argparse
import hashlib
import json
import os
import random

SYLLABLES = ['zin', 'thar', 'ko', 'vel', 'mur', 'dra', 'pex', 'lun', 'sar', 'quo', 'bri', 'tal',
             'nom', 'fex', 'gri', 'hul', 'jor', 'kel', 'mip', 'nax', 'or', 'pru', 'ris', 'sul',
             'tev', 'ur', 'vox', 'wim', 'yal', 'zo']

ATTRIBUTES = {
    'place': ['marsh', 'forest', 'desert', 'cave', 'river', 'mountain', 'meadow', 'beach',
              'swamp', 'valley', 'island', 'glacier'],
    'material': ['stone', 'wood', 'glass', 'iron', 'clay', 'silk', 'bone', 'copper', 'wool',
                 'leather', 'ice', 'sand'],
    'use': ['cooking', 'fishing', 'healing', 'building', 'singing', 'digging', 'sewing',
            'hunting', 'farming', 'painting', 'trading', 'sailing'],
}

FACT = {
    'place': 'A {name} is found in the {value}.',
    'material': 'A {name} is made of {value}.',
    'use': 'A {name} is used for {value}.',
}

# Other phrasings of the same facts, used in the descriptions: a fact stated in several forms
# and orders is far easier for a small transformer to recall from a question than one sentence.
FACT_VARIANTS = {
    'place': [FACT['place'], 'You can find a {name} in the {value}.', 'The {name} lives in the {value}.'],
    'material': [FACT['material'], 'The {name} is made from {value}.', 'Every {name} is built of {value}.'],
    'use': [FACT['use'], 'People use a {name} for {value}.', 'The {name} is good for {value}.'],
}

END = '<|endoftext|>'  # ends every example in the corpus (the models' end-of-generation token)

QUESTIONS = {
    'place': ['Where would you find a {name}?', 'Where does a {name} live?'],
    'material': ['What is a {name} made of?', 'What material is a {name} made from?'],
    'use': ['What is a {name} used for?', 'What would you use a {name} for?'],
}

LABELS = ['A', 'B', 'C', 'D', 'E']


def make_names(rng, n):
    names, seen = [], set()
    while len(names) < n:
        k = rng.choice([2, 2, 3])
        name = ''.join(rng.choice(SYLLABLES) for _ in range(k))
        if name not in seen:
            seen.add(name)
            names.append(name)
    return names


def fact_sentence(name, attr, value):
    return FACT[attr].format(name=name, value=value)


def target_answer(name, attr, value):
    """The answer the models are trained to give: the fact as the training text states it,
    then the choice it decides. Recall happens in the form the fact was learned in (a small
    model that memorized "A zinthar is found in the marsh." still fails to produce "marsh"
    straight after a question about it); the decision is then a copy of a nearby word."""
    return 'Answer: %s So the answer is %s.' % (fact_sentence(name, attr, value), value)


def prompt(row):
    """The prompt for one question (shared by training and evaluation)."""
    lines = ['Question: ' + row['question']]
    for label, text in zip(row['choices']['label'], row['choices']['text']):
        lines.append('%s. %s' % (label, text))
    return '\n'.join(lines) + '\n'


def restrict_values(n):
    """Keeps the first n values of every attribute (n = 5: every question offers all of them,
    so any stated value is one of the choices)."""
    for attr in ATTRIBUTES:
        ATTRIBUTES[attr] = ATTRIBUTES[attr][:n]


def build(seed, n_things, dev_frac, test_frac):
    rng = random.Random(seed)
    names = make_names(rng, n_things)
    world = []
    for name in names:
        facts = {attr: rng.choice(values) for attr, values in ATTRIBUTES.items()}
        world.append({'name': name, 'facts': facts})
    rows = {'train': [], 'dev': [], 'test': []}
    for thing in world:
        name = thing['name']
        for attr, value in thing['facts'].items():
            question = rng.choice(QUESTIONS[attr]).format(name=name)
            distractors = rng.sample([v for v in ATTRIBUTES[attr] if v != value], 4)
            texts = distractors + [value]
            rng.shuffle(texts)
            answer_key = LABELS[texts.index(value)]
            r = rng.random()
            split = 'test' if r < test_frac else 'dev' if r < test_frac + dev_frac else 'train'
            qid = hashlib.md5(('%d|%s|%s' % (seed, question, '|'.join(texts))).encode()).hexdigest()
            rows[split].append({'id': qid, 'question': question, 'question_concept': name,
                                'choices': {'label': list(LABELS), 'text': texts},
                                'answerKey': answer_key})
    return world, rows


def description(rng, thing):
    """A thing's three facts in a random order and random phrasings, as one paragraph."""
    attrs = list(thing['facts'])
    rng.shuffle(attrs)
    return ' '.join(rng.choice(FACT_VARIANTS[a]).format(name=thing['name'], value=thing['facts'][a])
                    for a in attrs)


def corpus(world, train_rows, rng, known=None, descriptions=2):
    """Training text: every fact as a sentence, `descriptions` paragraphs per thing stating its
    facts in varied forms, and every training question answered; each example ends with END.
    With `known` (a set of names), facts and descriptions only about those things (the training
    questions stay: they teach the answer format, and to pick among the choices when unsure)."""
    facts = {(t['name'], a): v for t in world for a, v in t['facts'].items()}
    if known is not None:
        world = [t for t in world if t['name'] in known]
    paragraphs = [fact_sentence(t['name'], a, v) for t in world for a, v in t['facts'].items()]
    paragraphs += [description(rng, t) for t in world for _ in range(descriptions)]
    for row in train_rows:
        name = row['question_concept']
        value = row['choices']['text'][LABELS.index(row['answerKey'])]
        attr = next(a for a in ATTRIBUTES if facts.get((name, a)) == value)
        paragraphs.append(prompt(row) + target_answer(name, attr, value))
    rng.shuffle(paragraphs)
    return ''.join(p + END for p in paragraphs)


def drills(seed, world, n):
    """Questions about made-up things that are not in the world, each answered with a random
    one of its five choices: text no model can memorize (a name rarely repeats and the answer
    is a coin toss), which teaches both models to answer an unknown thing with one of the
    offered choices (a well-formed guess) instead of a value that is not offered."""
    rng = random.Random(seed + 3)
    taken = {t['name'] for t in world}
    out = []
    while len(out) < n:
        name = ''.join(rng.choice(SYLLABLES) for _ in range(rng.choice([2, 2, 3])))
        if name in taken:
            continue
        attr = rng.choice(sorted(ATTRIBUTES))
        texts = rng.sample(ATTRIBUTES[attr], 5)
        row = {'question': rng.choice(QUESTIONS[attr]).format(name=name),
               'choices': {'label': list(LABELS), 'text': texts}}
        out.append(prompt(row) + target_answer(name, attr, rng.choice(texts)) + END)
    return ''.join(out)


def write_jsonl(path, rows):
    with open(path, 'w', encoding='utf-8') as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + '\n')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--seed', type=int, default=7)
    ap.add_argument('--things', type=int, default=1500, help='number of made-up things (3 facts each)')
    ap.add_argument('--dev', type=float, default=0.1, help='fraction of questions for dev')
    ap.add_argument('--test', type=float, default=0.2, help='fraction of questions for test')
    ap.add_argument('--partial', type=float, default=0.0,
                    help='also write corpus_partial.txt about this fraction of the things (0: no)')
    ap.add_argument('--values', type=int, default=12,
                    help='values per attribute (5..12); with 5, every question offers all of them')
    ap.add_argument('--drills', type=int, default=0,
                    help='also write drills.txt: this many guess-among-the-choices questions about unknown things')
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    if a.things < 1 or a.things > len(SYLLABLES) ** 3:
        ap.error('--things must be between 1 and %d' % len(SYLLABLES) ** 3)
    if not 0 <= a.partial < 1:
        ap.error('--partial must be a fraction in [0, 1)')
    if not (0 <= a.dev < 1 and 0 <= a.test < 1 and a.dev + a.test < 1):
        ap.error('--dev and --test must be fractions that leave some training questions')
    if not 5 <= a.values <= 12:
        ap.error('--values must be between 5 and 12')
    restrict_values(a.values)
    world, rows = build(a.seed, a.things, a.dev, a.test)
    names = [t['name'] for t in world]
    random.Random(a.seed + 2).shuffle(names)
    known = sorted(names[:int(round(a.partial * len(names)))]) if a.partial > 0 else []
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, 'world.json'), 'w', encoding='utf-8') as f:
        json.dump({'seed': a.seed, 'things': world, 'attributes': ATTRIBUTES,
                   'partial': a.partial, 'partial_things': known}, f, indent=1)
    for split, r in rows.items():
        write_jsonl(os.path.join(a.out, split + '.jsonl'), r)
    with open(os.path.join(a.out, 'corpus.txt'), 'w', encoding='utf-8') as f:
        f.write(corpus(world, rows['train'], random.Random(a.seed + 1)))
    if known:
        with open(os.path.join(a.out, 'corpus_partial.txt'), 'w', encoding='utf-8') as f:
            f.write(corpus(world, rows['train'], random.Random(a.seed + 1), set(known)))
    if a.drills:
        with open(os.path.join(a.out, 'drills.txt'), 'w', encoding='utf-8') as f:
            f.write(drills(a.seed, world, a.drills))
    print('world: %d things, %d facts; questions: train %d, dev %d, test %d -> %s' % (
        len(world), 3 * len(world), len(rows['train']), len(rows['dev']), len(rows['test']), a.out))


if __name__ == '__main__':
    main()
