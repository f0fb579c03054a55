#!/usr/bin/env python3
"""Conversations about the fictional world, in ChatML (the demo pair's chat format), so that the
bundled models can chat: `tlr chat`, the chat page and `/v1/chat/completions` ask free-form
questions, not the multiple-choice prompt the models first learned.

Every conversation asks only about facts whose question is in the TRAINING split (both models
already saw those facts asked, as multiple-choice questions), so no dev or test fact is ever
asked in training: a chat question about a test fact is answered from the fact sentences of the
corpus, as a multiple-choice test question is, and the small model still knows only the things
of its partial corpus. A conversation is one to three questions (free-form phrasings, follow-ups
about the same thing with "it"), sometimes opened by a system message or a greeting and closed
by thanks, sometimes the multiple-choice prompt itself; the answer states the fact as the
corpus does ("A zinthar is found in the marsh."). Each conversation ends with <|endoftext|>.

  python3 tools/worldgen/chat_corpus.py --data W --conversations 6000 --out W/chat.txt \\
      --router-rows W/router_chat.jsonl

--router-rows also writes chat rows for router training (the OpenAI fine-tuning format, with
the question's choices and answerKey so that answers can be graded): each DEV question asked
free-form in --router-variants phrasings, the gold fact sentence as the assistant's reference.
Standard library only; the same seed gives byte-identical files.
"""
import argparse
import hashlib
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import worldgen  # noqa: E402

ASK = {
    'place': ['Where would you find a {n}?', 'Where does a {n} live?', 'Where can I find a {n}?',
              'Where is a {n} found?', 'Do you know where a {n} is found?', 'Tell me where to find a {n}.',
              'where is the {n} found?', 'Where do {n}s live?'],
    'material': ['What is a {n} made of?', 'What material is a {n} made from?', 'What is a {n} made from?',
                 'Tell me what a {n} is made of.', 'Do you know what a {n} is made of?',
                 'what is the {n} made of?', 'What are {n}s made of?'],
    'use': ['What is a {n} used for?', 'What would you use a {n} for?', 'What is a {n} good for?',
            'What do people use a {n} for?', 'Tell me what a {n} is used for.', 'what is the {n} for?',
            'What are {n}s used for?'],
}
FOLLOW = {
    'place': ['And where is it found?', 'Where does it live?', 'And where would I find it?', 'Where is it from?'],
    'material': ['And what is it made of?', 'What is it made from?', 'What material is it?'],
    'use': ['And what is it used for?', 'What is it good for?', 'What do people use it for?'],
}
SYSTEM = ['You are a helpful assistant.', 'Answer briefly.', 'You know the things of this world.',
          'You are a helpful assistant. Answer in one sentence.']
GREETING = ['Hello!', 'Hi', 'Hi there!', 'Hello, who are you?', 'Good morning.', 'Hey']
GREETING_REPLY = 'Hello! I can tell you where a thing is found, what it is made of and what it is used for.'
THANKS = ['Thanks!', 'Thank you.', 'Great, thanks.']
UNKNOWN_REPLY = 'I do not know a {n}.'


def unknown_names(rng, world, n):
    """Made-up names that are not things of the world (asked about, they teach the models to copy
    the name from the question, which no memorized answer can do, and to say they do not know)."""
    taken = {t['name'] for t in world['things']}
    out = []
    while len(out) < n:
        name = ''.join(rng.choice(worldgen.SYLLABLES) for _ in range(rng.choice([2, 2, 3])))
        if name not in taken:
            out.append(name)
    return out
THANKS_REPLY = 'You are welcome.'


def facts_of(rows, world):
    """(name, attribute, value, row) for each question row, the attribute found from the world."""
    facts = {(t['name'], a): v for t in world['things'] for a, v in t['facts'].items()}
    out = []
    for row in rows:
        name = row['question_concept']
        value = row['choices']['text'][worldgen.LABELS.index(row['answerKey'])]
        attr = next(a for a in worldgen.ATTRIBUTES if facts.get((name, a)) == value)
        out.append((name, attr, value, row))
    return out


def render(messages):
    return ''.join('<|im_start|>%s\n%s<|im_end|>\n' % (m['role'], m['content']) for m in messages)


def conversation(rng, facts, by_thing, unknown, unknown_share):
    msgs = []
    if rng.random() < 0.2:
        msgs.append({'role': 'system', 'content': rng.choice(SYSTEM)})
    if rng.random() < 0.15:
        msgs += [{'role': 'user', 'content': rng.choice(GREETING)},
                 {'role': 'assistant', 'content': GREETING_REPLY}]
    name = None
    asked = set()
    for _ in range(rng.choice([1, 1, 2, 2, 3])):
        others = [f for f in by_thing.get(name, []) if f[1] not in asked]
        if name and others and rng.random() < 0.5:
            n, attr, value, row = rng.choice(others)
            question = rng.choice(FOLLOW[attr])
        elif unknown_share > 0 and rng.random() < unknown_share:
            n, attr = rng.choice(unknown), rng.choice(sorted(ASK))
            name, asked = None, set()
            msgs += [{'role': 'user', 'content': rng.choice(ASK[attr]).format(n=n)},
                     {'role': 'assistant', 'content': UNKNOWN_REPLY.format(n=n)}]
            continue
        else:
            n, attr, value, row = rng.choice(facts)
            asked = set()
            if rng.random() < 0.15:
                question = worldgen.prompt(row).rstrip('\n')
            else:
                question = rng.choice(ASK[attr]).format(n=n)
        name = n
        asked.add(attr)
        answer = worldgen.fact_sentence(n, attr, value)
        if question.startswith('Question:'):
            answer = worldgen.target_answer(n, attr, value)
        msgs += [{'role': 'user', 'content': question}, {'role': 'assistant', 'content': answer}]
    if rng.random() < 0.1:
        msgs += [{'role': 'user', 'content': rng.choice(THANKS)}, {'role': 'assistant', 'content': THANKS_REPLY}]
    return msgs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--data', required=True, help='worldgen output (world.json, train.jsonl, dev.jsonl)')
    ap.add_argument('--conversations', type=int, default=6000)
    ap.add_argument('--seed', type=int, default=11)
    ap.add_argument('--unknown-share', type=float, default=0.25,
                    help='share of questions about made-up things outside the world ("I do not know a ...")')
    ap.add_argument('--out', required=True, help='the conversations as training text (ChatML)')
    ap.add_argument('--partial', action='store_true',
                    help='only the things of the partial corpus (world.json partial_things): for the small model, '
                         'which then spends no capacity on facts it was not told about')
    ap.add_argument('--router-rows', default='', help='also write chat rows of the dev questions here')
    ap.add_argument('--router-variants', type=int, default=4, help='free-form phrasings per dev question')
    a = ap.parse_args()
    world = json.load(open(os.path.join(a.data, 'world.json'), encoding='utf-8'))
    worldgen.restrict_values(len(next(iter(world['attributes'].values()))))
    read = lambda split: [json.loads(l) for l in open(os.path.join(a.data, split + '.jsonl'), encoding='utf-8')]
    facts = facts_of(read('train'), world)
    if a.partial:
        known = set(world['partial_things'])
        facts = [f for f in facts if f[0] in known]
    by_thing = {}
    for f in facts:
        by_thing.setdefault(f[0], []).append(f)
    rng = random.Random(a.seed)
    unknown = unknown_names(random.Random(a.seed + 1), world, 3000)
    with open(a.out, 'w', encoding='utf-8') as out:
        for _ in range(a.conversations):
            out.write(render(conversation(rng, facts, by_thing, unknown, a.unknown_share)) + worldgen.END)
    print('%d conversations about %d training facts%s -> %s' % (a.conversations, len(facts),
                                                                 ' of the partial corpus' if a.partial else '', a.out))
    if a.router_rows:
        rows = []
        for name, attr, value, row in facts_of(read('dev'), world):
            for k in range(a.router_variants):
                question = ASK[attr][k % len(ASK[attr])].format(n=name)
                qid = hashlib.md5(('%s|chat|%d|%s' % (row['id'], k, question)).encode()).hexdigest()
                rows.append({'id': qid, 'question': question, 'question_concept': name,
                             'choices': row['choices'], 'answerKey': row['answerKey'],
                             'messages': [{'role': 'user', 'content': question},
                                          {'role': 'assistant', 'content': worldgen.fact_sentence(name, attr, value)}]})
        worldgen.write_jsonl(a.router_rows, rows)
        print('%d router chat rows (dev questions) -> %s' % (len(rows), a.router_rows))


if __name__ == '__main__':
    main()
