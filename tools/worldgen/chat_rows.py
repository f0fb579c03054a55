#!/usr/bin/env python3
"""Question rows (CommonsenseQA schema, with a "reference" answer) as chat rows in the OpenAI
fine-tuning format, for router training on chat data: each row becomes
{"messages": [{"role": "user", "content": <the question and its choices>},
              {"role": "assistant", "content": <the reference>}], ...} and keeps its id,
question, question_concept, choices and answerKey, so that its answers can still be graded.
Rows without a reference get only the user message (the LLM answers them).

  python3 tools/worldgen/chat_rows.py --data W/router_train.jsonl --out W/router_train_chat.jsonl
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import worldgen  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--data', required=True, help='question rows (JSONL)')
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    n = 0
    with open(a.data, encoding='utf-8') as f, open(a.out, 'w', encoding='utf-8') as out:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            messages = [{'role': 'user', 'content': worldgen.prompt(row)}]
            if row.get('reference'):
                messages.append({'role': 'assistant', 'content': row.pop('reference')})
            row['messages'] = messages
            out.write(json.dumps(row) + '\n')
            n += 1
    print('%d chat rows -> %s' % (n, a.out))


if __name__ == '__main__':
    main()
