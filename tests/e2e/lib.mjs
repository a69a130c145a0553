// lib.mjs — shared helpers of the end-to-end tests: the server URLs (from
// scripts/run_e2e.sh), the official clients pointed at them, raw HTTP helpers,
// the tokenizer endpoints and the checks every bad-input test makes (status
// code, error body in the surface's own format, server still healthy).
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';

export const URL_MAIN = process.env.KESTREL_URL;
export const URL_AUTH = process.env.KESTREL_URL_AUTH; // --api-key secret
export const API_KEY = process.env.KESTREL_API_KEY || 'secret';
if (!URL_MAIN) throw new Error('KESTREL_URL is not set: run the tests through scripts/run_e2e.sh');

export function openai(url = URL_MAIN, apiKey = 'x') {
  return new OpenAI({ baseURL: url + '/v1', apiKey, maxRetries: 0, timeout: 120_000 });
}
export function anthropic(url = URL_MAIN, apiKey = 'x') {
  return new Anthropic({ baseURL: url, apiKey, maxRetries: 0, timeout: 120_000 });
}
export function ollama(url = URL_MAIN, headers = undefined) {
  return new Ollama({ host: url, headers });
}

// The served model id (the directory name unless --served-model-name).
let modelName;
export async function model() {
  if (!modelName) {
    const r = await fetch(URL_MAIN + '/v1/models');
    assert.equal(r.status, 200);
    modelName = (await r.json()).data[0].id;
  }
  return modelName;
}

// Raw request; returns {status, headers, text, json} (json undefined when the
// body is not JSON). body: object (sent as JSON), string or Buffer (sent as is).
export async function http(method, path, body, { url = URL_MAIN, headers = {} } = {}) {
  const init = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.body = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
    if (!Object.keys(init.headers).some((h) => h.toLowerCase() === 'content-type'))
      init.headers['content-type'] = 'application/json';
  }
  const r = await fetch(url + path, init);
  const text = await r.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: r.status, headers: r.headers, text, json };
}
export const post = (path, body, opts) => http('POST', path, body, opts);
export const get = (path, opts) => http('GET', path, undefined, opts);

export async function tokenize(content, add_special = false) {
  const r = await post('/tokenize', { content, add_special });
  assert.equal(r.status, 200, r.text);
  return r.json.tokens;
}
export async function detokenize(tokens) {
  const r = await post('/detokenize', { tokens });
  assert.equal(r.status, 200, r.text);
  return r.json.content;
}

// The ChatML rendering of tinycoder's chat template for plain text messages
// (no tools), as the template writes it: to check prompt token counts.
export function chatml(messages, addGenerationPrompt = true) {
  let s = '';
  for (const m of messages) s += `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`;
  if (addGenerationPrompt) s += '<|im_start|>assistant\n';
  return s;
}

export async function health(url = URL_MAIN) {
  const r = await fetch(url + '/health');
  assert.equal(r.status, 200, 'server no longer healthy');
  const j = await r.json();
  assert.equal(j.status, 'ok');
  return j;
}

// Waits until the engine has nothing active or queued (after a cancel).
export async function waitIdle(ms = 10_000, url = URL_MAIN) {
  const t0 = Date.now();
  let j;
  while (Date.now() - t0 < ms) {
    j = await health(url);
    if (j.active === 0 && j.queued === 0) return j;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`engine not idle after ${ms} ms: ${JSON.stringify(j)}`);
}

// Error body checks, one per surface's own format.
export function assertOpenAIError(r, status, { param, code } = {}) {
  assert.equal(r.status, status, `expected HTTP ${status}, got ${r.status}: ${r.text}`);
  assert.ok(r.json && typeof r.json.error === 'object', `not an OpenAI error body: ${r.text}`);
  const e = r.json.error;
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 0);
  assert.equal(typeof e.type, 'string');
  assert.ok('param' in e, 'error.param missing');
  assert.ok('code' in e, 'error.code missing');
  if (param !== undefined) assert.equal(e.param, param);
  if (code !== undefined) assert.equal(e.code, code, r.text);
}
export function assertAnthropicError(r, status, type) {
  assert.equal(r.status, status, `expected HTTP ${status}, got ${r.status}: ${r.text}`);
  assert.ok(r.json, `not JSON: ${r.text}`);
  assert.equal(r.json.type, 'error', r.text);
  assert.equal(typeof r.json.error, 'object');
  assert.equal(typeof r.json.error.message, 'string');
  assert.ok(r.json.error.message.length > 0);
  if (type) assert.equal(r.json.error.type, type, r.text);
}
export function assertOllamaError(r, status) {
  assert.equal(r.status, status, `expected HTTP ${status}, got ${r.status}: ${r.text}`);
  assert.ok(r.json, `not JSON: ${r.text}`);
  assert.equal(typeof r.json.error, 'string', r.text);
  assert.ok(r.json.error.length > 0);
}

// A text of about `fraction` of the server's context: {ctx, part, partTokens}
// (turns of a chat made to outgrow it).
export async function contextPart(fraction) {
  const ctx = Number(process.env.KESTREL_CTX || 4096);
  const unit = 'the quick brown fox jumps over the lazy dog. ';
  const per = (await tokenize(unit.repeat(8))).length / 8;
  const part = unit.repeat(Math.ceil((fraction * ctx) / per));
  return { ctx, part, partTokens: (await tokenize(part)).length };
}

// A text longer than the server's context, in tokens.
export async function overlongText() {
  const ctx = Number(process.env.KESTREL_CTX || 4096);
  const unit = 'the quick brown fox jumps over the lazy dog. ';
  const per = (await tokenize(unit.repeat(8))).length / 8;
  const text = unit.repeat(Math.ceil((ctx + 64) / per));
  const n = (await tokenize(text)).length;
  assert.ok(n > ctx, `overlong text has ${n} tokens, ctx ${ctx}`);
  return text;
}

// A tool the tests offer, in each surface's shape.
export const weatherParams = {
  type: 'object',
  properties: { city: { type: 'string', description: 'city name' } },
  required: ['city'],
};
export const weatherDesc = 'Get the current weather in a city';

// tinycoder is a code model: its <tool_call> token is (nearly) never sampled.
// These are the prompts tried, in order; a tool-emission test uses the first
// that yields a parsed call and skips (saying so) when none does.
export const TOOL_PROMPTS = [
  'Call get_weather for Paris.',
  'What is the weather in Paris? Use the get_weather tool.',
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
];
export const NO_TOOL_CALL =
  'tinycoder did not emit <tool_call> for any of the prompts tried (its tool-call token is untrained): tool-call parsing not exercised';

// Chunks of an SSE body: [{event, data}] (data parsed as JSON unless [DONE]).
export function parseSSE(text) {
  const out = [];
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    let event = null;
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    const d = data.join('\n');
    out.push({ event, data: d === '[DONE]' ? d : JSON.parse(d) });
  }
  return out;
}

// Greedy text with a stop string cut at the stop: the prefix of `full` before
// the first occurrence of `stop`.
export function cutAt(full, stop) {
  const i = full.indexOf(stop);
  return i < 0 ? full : full.slice(0, i);
}

// A stop string taken from the middle of a greedy output: a short piece that
// first occurs after some text (so the cut output is non-empty).
export function pickStop(full) {
  const words = full.split(/(\s+)/).filter((w) => /^\w{3,}$/.test(w));
  for (const w of words) {
    const i = full.indexOf(w);
    if (i >= 8) return w;
  }
  assert.fail('no stop string candidate in ' + JSON.stringify(full));
}
