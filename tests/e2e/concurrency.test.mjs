// concurrency.test.mjs — 32 concurrent streaming chat clients (temperature 0,
// different prompts, max_tokens 32) all complete, each with exactly the text
// the same request gives when run alone afterwards (batching must not change
// greedy output), and the server stays up.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as L from './lib.mjs';

const N = 32;
const NAMES = [
  ['add', 'Return the sum of a and b.'], ['is_even', 'Return True if n is even.'], ['clamp', 'Clamp x into [lo, hi].'],
  ['word_count', 'Count the words in a string.'], ['mean', 'Average of a list of numbers.'], ['flatten', 'Flatten a nested list.'],
  ['parse_header', 'Parse an HTTP header line.'], ['read_json', 'Load a JSON file and return the object.'],
  ['slugify', 'Turn a title into a URL slug.'], ['chunks', 'Split a list into chunks of size n.'],
  ['is_prime', 'Return True if n is prime.'], ['gcd', 'Greatest common divisor of a and b.'],
  ['reverse_words', 'Reverse the order of words in a sentence.'], ['to_snake', 'Convert CamelCase to snake_case.'],
  ['merge_dicts', 'Merge two dictionaries.'], ['unique', 'Return the unique items of a list, keeping order.'],
];

function request(i) {
  const [name, doc] = NAMES[i % NAMES.length];
  const variant = i < NAMES.length ? '' : ' Handle empty input.';
  return {
    messages: [
      { role: 'system', content: 'You are a helpful coding assistant.' },
      { role: 'user', content: `Write a Python function \`${name}\`: ${doc}${variant}` },
    ],
    max_tokens: 32,
    temperature: 0,
  };
}

test(`${N} concurrent streaming clients complete with the same output as run alone`, async () => {
  const model = await L.model();
  const client = L.openai();
  const t0 = Date.now();
  const streamed = await Promise.all(
    Array.from({ length: N }, async (_, i) => {
      const stream = await client.chat.completions.create({ model, ...request(i), stream: true, stream_options: { include_usage: true } });
      let text = '';
      let finish = null;
      let usage = null;
      for await (const c of stream) {
        if (c.usage) usage = c.usage;
        for (const ch of c.choices) {
          text += ch.delta?.content ?? '';
          if (ch.finish_reason) finish = ch.finish_reason;
        }
      }
      return { text, finish, usage };
    }),
  );
  const concurrentMs = Date.now() - t0;
  await L.health();
  const mismatches = [];
  for (let i = 0; i < N; i++) {
    const alone = await client.chat.completions.create({ model, ...request(i) });
    const s = streamed[i];
    assert.ok(s.finish, `client ${i} got no finish_reason`);
    assert.ok(s.text.length > 0, `client ${i} got no text`);
    if (s.text !== alone.choices[0].message.content || s.finish !== alone.choices[0].finish_reason)
      mismatches.push({ i, streamed: s.text, alone: alone.choices[0].message.content });
    assert.equal(s.usage?.completion_tokens, alone.usage.completion_tokens, `client ${i} completion_tokens`);
    assert.equal(s.usage?.prompt_tokens, alone.usage.prompt_tokens, `client ${i} prompt_tokens`);
  }
  assert.deepEqual(mismatches, [], `${mismatches.length} of ${N} outputs differ from the same request run alone`);
  const h = await L.waitIdle();
  assert.equal(h.status, 'ok');
  console.log(`# ${N} concurrent streams took ${concurrentMs} ms`);
});

test('concurrent clients across all surfaces at once; the server stays up', async () => {
  const model = await L.model();
  const oai = L.openai();
  const ant = L.anthropic();
  const oll = L.ollama();
  const user = (i) => `Write a Python function \`f${i}\`: Return ${i} times x.`;
  const jobs = [];
  for (let i = 0; i < 4; i++) {
    jobs.push(oai.chat.completions.create({ model, messages: [{ role: 'user', content: user(i) }], max_tokens: 16, temperature: 0 }).then((r) => r.choices[0].message.content));
    jobs.push(oai.completions.create({ model, prompt: `def f${i}(x):\n`, max_tokens: 16, temperature: 0 }).then((r) => r.choices[0].text));
    jobs.push(oai.responses.create({ model, input: user(i), max_output_tokens: 16, temperature: 0 }).then((r) => r.output_text));
    jobs.push(ant.messages.create({ model, messages: [{ role: 'user', content: user(i) }], max_tokens: 16, temperature: 0 }).then((r) => r.content.map((b) => b.text ?? '').join('')));
    jobs.push(oll.chat({ model, messages: [{ role: 'user', content: user(i) }], options: { num_predict: 16, temperature: 0 } }).then((r) => r.message.content));
    jobs.push(oll.generate({ model, prompt: user(i), options: { num_predict: 16, temperature: 0 } }).then((r) => r.response));
  }
  const res = await Promise.allSettled(jobs);
  await L.health();
  const failed = res.map((r, i) => [i, r]).filter(([, r]) => r.status === 'rejected' || !(r.value?.length > 0));
  assert.deepEqual(failed.map(([i, r]) => `job ${i}: ${r.reason?.message ?? 'empty output'}`), []);
});
