#!/usr/bin/env python3
"""Tests for worldgen.py (ctest label unit): the schema is exactly CommonsenseQA's (checked
against ../shared/datasets/commonsenseqa_dev.jsonl), choices are five distinct values of the
asked attribute with the right answer among them, splits are disjoint, every dev/test fact is
stated in the training corpus while its question is not, and the same seed gives identical
files. Usage: worldgen_test.py SHARED_DIR"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import worldgen  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def load(path):
    with open(path, encoding='utf-8') as f:
        return [json.loads(line) for line in f]


def run(seed, out):
    subprocess.run([sys.executable, os.path.join(HERE, 'worldgen.py'), '--seed', str(seed),
                    '--things', '300', '--partial', '0.3', '--out', out], check=True,
                   stdout=subprocess.DEVNULL)


def digest(d):
    h = hashlib.sha256()
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), 'rb') as f:
            h.update(name.encode() + f.read())
    return h.hexdigest()


def main():
    shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, '..', '..', '..', 'shared')
    reference = load(os.path.join(shared, 'datasets', 'commonsenseqa_dev.jsonl'))[0]
    with tempfile.TemporaryDirectory() as tmp:
        a, b, c = (os.path.join(tmp, x) for x in 'abc')
        run(7, a)
        run(7, b)
        run(8, c)
        check(digest(a) == digest(b), 'same seed must give identical files')
        check(digest(a) != digest(c), 'another seed must give another world')
        world = json.load(open(os.path.join(a, 'world.json')))
        facts = {(t['name'], attr): v for t in world['things'] for attr, v in t['facts'].items()}
        corpus = open(os.path.join(a, 'corpus.txt'), encoding='utf-8').read()
        splits = {s: load(os.path.join(a, s + '.jsonl')) for s in ('train', 'dev', 'test')}
        ids = [r['id'] for rows in splits.values() for r in rows]
        check(len(ids) == len(set(ids)) == 3 * 300, 'one question per fact, unique ids')
        check(len(splits['test']) > 0 and len(splits['dev']) > 0, 'dev and test are not empty')
        for split, rows in splits.items():
            for r in rows:
                check(list(r.keys()) == list(reference.keys()), 'keys as CommonsenseQA: %s' % list(r.keys()))
                check(list(r['choices'].keys()) == list(reference['choices'].keys()), 'choices keys')
                check(r['choices']['label'] == ['A', 'B', 'C', 'D', 'E'], 'labels A-E')
                texts = r['choices']['text']
                check(len(set(texts)) == 5, 'five distinct choices')
                kinds = [next(k for k, vs in worldgen.ATTRIBUTES.items() if t in vs) for t in texts]
                check(len(set(kinds)) == 1, 'distractors of the same kind: %s' % texts)
                answer = texts['ABCDE'.index(r['answerKey'])]
                check(facts[(r['question_concept'], kinds[0])] == answer, 'answerKey is the fact')
                sentence = worldgen.fact_sentence(r['question_concept'], kinds[0], answer)
                check(sentence in corpus, 'the fact is stated in the training text: ' + sentence)
                stated = worldgen.prompt(r) in corpus
                check(stated == (split == 'train'), '%s question %s in the training text' % (
                    split, 'missing from' if split == 'train' else 'leaked into'))
                ans = worldgen.target_answer(r['question_concept'], kinds[0], answer)
                check(ans == 'Answer: %s So the answer is %s.' % (sentence, answer),
                      'answer states the fact, then the choice: ' + ans)
        # The partial corpus states the dev/test facts of exactly the listed 30% of the things
        # (training questions, with the facts in their answers, stay for every thing).
        partial = open(os.path.join(a, 'corpus_partial.txt'), encoding='utf-8').read()
        known = set(world['partial_things'])
        check(len(known) == 90, 'partial covers 30%% of 300 things: %d' % len(known))
        for split in ('dev', 'test'):
            for r in splits[split]:
                name = r['question_concept']
                attr = next(k for k, vs in worldgen.ATTRIBUTES.items() if r['choices']['text'][0] in vs)
                stated = worldgen.fact_sentence(name, attr, facts[(name, attr)]) in partial
                check(stated == (name in known), 'partial corpus and %s disagree' % name)
        for r in splits['train']:
            check(worldgen.prompt(r) in partial, 'the partial corpus keeps every training question')
        # The chat conversations ask only training-split facts (never a dev or test question's
        # fact, nor its thing with that attribute), answer with the fact sentence, and with
        # --partial only about the things of the partial corpus; made-up things are not in the
        # world.
        sys.path.insert(0, HERE)
        import chat_corpus  # noqa: E402
        chat = os.path.join(tmp, 'chat.txt')
        subprocess.run([sys.executable, os.path.join(HERE, 'chat_corpus.py'), '--data', a, '--conversations', '400',
                        '--out', chat, '--router-rows', os.path.join(tmp, 'rows.jsonl')], check=True,
                       stdout=subprocess.DEVNULL)
        text = open(chat, encoding='utf-8').read()
        check(text.count('<|im_start|>assistant\n') >= 400 and text.count(worldgen.END) == 400, 'ChatML conversations')
        held_out = {worldgen.fact_sentence(r['question_concept'], k, r['choices']['text']['ABCDE'.index(r['answerKey'])])
                    for s in ('dev', 'test') for r in splits[s]
                    for k in [next(k for k, vs in worldgen.ATTRIBUTES.items() if r['choices']['text'][0] in vs)]}
        answers = set()
        for turn in text.split('<|im_start|>assistant\n')[1:]:
            answers.add(turn.split('<|im_end|>')[0])
        check(not (answers & held_out), 'a dev/test fact answered in the chat corpus')
        check(any(x.startswith('I do not know a ') for x in answers), 'made-up things are asked about')
        for x in answers:
            if x.startswith('I do not know a '):
                check(x[len('I do not know a '):-1] not in {t['name'] for t in world['things']}, 'made-up name in the world')
        subprocess.run([sys.executable, os.path.join(HERE, 'chat_corpus.py'), '--data', a, '--conversations', '200',
                        '--partial', '--out', chat], check=True, stdout=subprocess.DEVNULL)
        text = open(chat, encoding='utf-8').read()
        for name, attr, value, _ in chat_corpus.facts_of(splits['train'], world):
            if name not in known:
                check(worldgen.fact_sentence(name, attr, value) not in text, '--partial asks about ' + name)
        rows = load(os.path.join(tmp, 'rows.jsonl'))
        check(len(rows) == 4 * len(splits['dev']), 'four chat rows per dev question')
        check(all(r['messages'][-1]['role'] == 'assistant' and r['answerKey'] for r in rows), 'graded chat rows')
        # --values 5: every question offers all five values of its attribute.
        d = os.path.join(tmp, 'd')
        subprocess.run([sys.executable, os.path.join(HERE, 'worldgen.py'), '--things', '50', '--values', '5',
                        '--out', d], check=True, stdout=subprocess.DEVNULL)
        for r in load(os.path.join(d, 'test.jsonl')) + load(os.path.join(d, 'train.jsonl')):
            check(len(set(r['choices']['text'])) == 5, 'five distinct choices with --values 5')
        check(subprocess.run([sys.executable, os.path.join(HERE, 'worldgen.py'), '--values', '3',
                              '--out', d], capture_output=True).returncode != 0, '--values 3 is refused')
    if failures:
        for f in sorted(set(failures))[:20]:
            print('FAIL:', f)
        print('0 passed, %d failed' % len(set(failures)))
        sys.exit(1)
    print('1 passed, 0 failed')


if __name__ == '__main__':
    main()
