// npm `@anthropic-ai/sdk` against a real reconfd, run by TestNode
// (node_test.go), which passes reconfd's address in SDK_MATRIX_URL (ending
// in /v1) and its client key in SDK_MATRIX_KEY, sent as x-api-key as the
// SDK does. The error matrix runs over the table `endpoints`.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

const baseURL = process.env.SDK_MATRIX_URL?.replace(/\/v1$/, '');
const apiKey = process.env.SDK_MATRIX_KEY;
assert.ok(baseURL && apiKey, 'SDK_MATRIX_URL and SDK_MATRIX_KEY are set by the Go test');

const madeID = /^req_[0-9a-f]{32}$/;
const client = (opts = {}) => new Anthropic({ baseURL, apiKey, timeout: 30_000, ...opts });
const params = (model, max_tokens = 64) => ({
  model,
  max_tokens,
  messages: [{ role: 'user', content: 'Say hello in four words' }],
});

async function drain(stream) {
  for await (const _ of stream);
}

const endpoints = [
  {
    name: 'messages',
    call: (c, model) => c.messages.create(params(model)),
    bad: (c) => c.messages.create(params('gpt-4o-mini', 0)),
  },
  {
    name: 'messages stream',
    call: async (c, model) => drain(await c.messages.create({ ...params(model), stream: true })),
    bad: async (c) => drain(await c.messages.create({ ...params('gpt-4o-mini', 0), stream: true })),
  },
  {
    name: 'messages.stream helper',
    call: (c, model) => c.messages.stream(params(model)).finalMessage(),
    bad: (c) => c.messages.stream(params('gpt-4o-mini', 0)).finalMessage(),
  },
];

async function rejectsWith(p, cls, status, type) {
  let err;
  await assert.rejects(p, (e) => { err = e; return true; });
  assert.ok(err instanceof cls, `got ${err?.constructor?.name}: ${err?.message}, want ${cls.name}`);
  assert.equal(err.status, status);
  assert.equal(err.type, type);
  return err;
}

for (const ep of endpoints) {
  describe(ep.name, () => {
    test('401 AuthenticationError', async () => {
      let requests = 0;
      const c = client({ apiKey: 'sk-not-a-key', fetch: (...a) => { requests++; return fetch(...a); } });
      const err = await rejectsWith(ep.call(c, 'gpt-4o-mini'), Anthropic.AuthenticationError, 401, 'authentication_error');
      assert.equal(requests, 1, 'a 401 is not retried');
      assert.match(err.requestID ?? '', madeID, 'a 401 given before the body is read carries a request id too');
    });
    test('404 NotFoundError', async () => {
      const err = await rejectsWith(ep.call(client(), 'no-such-model'), Anthropic.NotFoundError, 404, 'not_found_error');
      assert.match(err.requestID, madeID);
    });
    test('400 BadRequestError', async () => {
      const err = await rejectsWith(ep.bad(client()), Anthropic.BadRequestError, 400, 'invalid_request_error');
      assert.match(err.requestID, madeID);
    });
  });
}

describe('messages', () => {
  test('success', async () => {
    const { data: got, request_id } = await client().messages.create(params('gpt-4o-mini')).withResponse();
    assert.equal(got.type, 'message');
    assert.equal(got.stop_reason, 'end_turn');
    assert.equal(got.content.length, 1);
    assert.ok(got.content[0].text.startsWith('[backend stub, model stub-1]'), got.content[0].text);
    assert.equal(got.usage.output_tokens, 8);
    assert.match(request_id, madeID);
    assert.equal(got._request_id, request_id);
  });

  test('stream with for await, and the stream helper', async () => {
    const c = client();
    const whole = await c.messages.create(params('gpt-4o-mini'));
    const want = whole.content[0].text;
    let text = '';
    const types = [];
    for await (const ev of await c.messages.create({ ...params('gpt-4o-mini'), stream: true })) {
      types.push(ev.type);
      if (ev.type === 'content_block_delta') text += ev.delta.text;
    }
    assert.equal(text, want);
    assert.equal(types[0], 'message_start');
    assert.equal(types.at(-1), 'message_stop');

    const stream = c.messages.stream(params('gpt-4o-mini'));
    let deltas = '';
    stream.on('text', (d) => { deltas += d; });
    const final = await stream.finalMessage();
    assert.equal(deltas, want);
    assert.equal(final.content[0].text, want);
    assert.equal(final.stop_reason, 'end_turn');
    assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
    assert.equal(await stream.finalText?.() ?? want, want);
  });

  test('429 RateLimitError, then retried after Retry-After', async () => {
    const calls = (maxRetries) => Promise.all([0, 1, 2].map(async () => {
      let requests = 0;
      const c = client({ maxRetries, fetch: (...a) => { requests++; return fetch(...a); } });
      try {
        await c.messages.create(params('narrow'));
        return { requests, err: null };
      } catch (err) {
        return { requests, err };
      }
    }));
    const once = await calls(0);
    const limited = once.filter((c) => c.err);
    assert.equal(limited.length, 1, 'the third in line gets 429');
    await rejectsWith(Promise.reject(limited[0].err), Anthropic.RateLimitError, 429, 'rate_limit_error');
    const retried = await calls(2);
    assert.ok(retried.every((c) => c.err === null), 'every call succeeds with retries');
    assert.ok(retried.some((c) => c.requests > 1), 'a call was retried');
  });
});
