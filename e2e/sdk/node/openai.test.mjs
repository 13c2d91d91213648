// npm `openai` against a real reconfd, run by TestOpenAINode (node_test.go),
// which starts reconfd and passes its address in SDK_MATRIX_URL (ending in
// /v1) and its client key in SDK_MATRIX_KEY. Each endpoint is a block of
// tests; the error matrix runs over the table `endpoints`.
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.SDK_MATRIX_URL;
const apiKey = process.env.SDK_MATRIX_KEY;
assert.ok(baseURL && apiKey, 'SDK_MATRIX_URL and SDK_MATRIX_KEY are set by the Go test');

const slashModel = 'meta-llama/Llama-3.1-8B-Instruct';
const madeID = /^req_[0-9a-f]{32}$/;

function client(opts = {}) {
  return new OpenAI({ baseURL, apiKey, timeout: 30_000, ...opts });
}

const params = (model) => ({
  model,
  messages: [{ role: 'user', content: 'Say hello in four words' }],
});

async function drain(stream) {
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  return text;
}

// Every endpoint npm `openai` calls: call(c, model) succeeds with the
// matrix's key and model "gpt-4o-mini"; bad(c) is refused with 400; a
// null field is a path the endpoint does not have.
const endpoints = [
  {
    name: 'chat.completions',
    call: (c, model) => c.chat.completions.create(params(model)),
    bad: (c) => c.chat.completions.create({ model: 'gpt-4o-mini', messages: [] }),
  },
  {
    name: 'chat.completions stream',
    call: async (c, model) => drain(await c.chat.completions.create({ ...params(model), stream: true })),
    bad: async (c) => drain(await c.chat.completions.create({ model: 'gpt-4o-mini', messages: [], stream: true })),
  },
  {
    name: 'chat.completions.stream helper',
    call: (c, model) => c.chat.completions.stream(params(model)).finalChatCompletion(),
    bad: (c) => c.chat.completions.stream({ model: 'gpt-4o-mini', messages: [] }).finalChatCompletion(),
  },
  {
    name: 'embeddings',
    call: (c, model) => c.embeddings.create({ model, input: 'hello' }),
    bad: (c) => c.embeddings.create({ model: 'stub-1', input: [] }),
  },
  {
    name: 'responses',
    call: (c, model) => c.responses.create({ model, input: 'Say hello in four words' }),
    bad: (c) => c.responses.create({ model: 'gpt-4o-mini', input: 'hi', store: true }),
    badCode: 'unsupported_parameter',
  },
  {
    name: 'responses stream',
    call: async (c, model) => { for await (const _ of await c.responses.create({ model, input: 'hi', stream: true })); },
  },
  {
    name: 'models.list',
    call: async (c) => { for await (const _ of c.models.list()); },
    usesModel: false,
  },
  {
    name: 'models.retrieve',
    call: (c, model) => c.models.retrieve(model),
  },
];

// rejectsWith checks that p rejects with the SDK's error class, status and
// the gateway's code, and returns the error.
async function rejectsWith(p, cls, status, code) {
  let err;
  await assert.rejects(p, (e) => { err = e; return true; });
  assert.ok(err instanceof cls, `got ${err?.constructor?.name}: ${err?.message}, want ${cls.name}`);
  assert.ok(err instanceof OpenAI.APIError);
  assert.equal(err.status, status);
  assert.equal(err.code, code);
  assert.ok(err.message && err.type, 'an error with a message and a type');
  return err;
}

for (const ep of endpoints) {
  describe(ep.name, () => {
    test('401 AuthenticationError', async () => {
      let requests = 0;
      const c = client({ apiKey: 'sk-not-a-key', fetch: (...a) => { requests++; return fetch(...a); } });
      const err = await rejectsWith(ep.call(c, 'gpt-4o-mini'), OpenAI.AuthenticationError, 401, 'invalid_api_key');
      assert.equal(requests, 1, 'a 401 is not retried');
      assert.match(err.requestID ?? '', madeID, 'a 401 given before the body is read carries a request id too');
    });
    if (ep.usesModel !== false) {
      test('404 NotFoundError', async () => {
        let requests = 0;
        const c = client({ fetch: (...a) => { requests++; return fetch(...a); } });
        const err = await rejectsWith(ep.call(c, 'no-such-model'), OpenAI.NotFoundError, 404, 'model_not_found');
        assert.match(err.message, /no-such-model/);
        assert.match(err.requestID, madeID);
        assert.equal(requests, 1, 'a 404 is not retried');
      });
    }
    if (ep.bad) {
      test('400 BadRequestError', async () => {
        const err = await rejectsWith(ep.bad(client()), OpenAI.BadRequestError, 400, ep.badCode ?? 'invalid_request');
        assert.match(err.requestID, madeID);
      });
    }
  });
}

describe('chat.completions', () => {
  test('success', async () => {
    const c = client();
    const got = await c.chat.completions.create(params('gpt-4o-mini'));
    assert.equal(got.object, 'chat.completion');
    assert.equal(got.choices.length, 1);
    const [ch] = got.choices;
    assert.equal(ch.finish_reason, 'stop');
    assert.equal(ch.message.role, 'assistant');
    assert.ok(ch.message.content.startsWith('[backend stub, model stub-1]'), ch.message.content);
    assert.equal(ch.message.refusal, null);
    assert.equal(got.usage.completion_tokens, 8);
    assert.match(got._request_id, madeID);

    const mine = await c.chat.completions.create(params('gpt-4o-mini'), { headers: { 'X-Request-Id': 'trace-42/a' } });
    assert.equal(mine._request_id, 'trace-42/a');
    const { request_id } = await c.chat.completions.create(params('gpt-4o-mini')).withResponse();
    assert.match(request_id, madeID);
  });

  test('stream with for await, with and without include_usage', async () => {
    const c = client();
    const whole = await c.chat.completions.create(params('gpt-4o-mini'));
    const want = whole.choices[0].message.content;
    for (const includeUsage of [false, true]) {
      const body = { ...params('gpt-4o-mini'), stream: true };
      if (includeUsage) body.stream_options = { include_usage: true };
      const { data: stream, request_id } = await c.chat.completions.create(body).withResponse();
      assert.match(request_id, madeID);
      let text = '', finish = null, usage = null, chunks = 0;
      for await (const chunk of stream) {
        chunks++;
        assert.equal(chunk.object, 'chat.completion.chunk');
        if (chunk.choices.length === 0) {
          assert.ok(includeUsage, 'a chunk without choices only with include_usage');
          usage = chunk.usage;
          continue;
        }
        text += chunk.choices[0].delta.content ?? '';
        finish = chunk.choices[0].finish_reason ?? finish;
      }
      assert.equal(text, want);
      assert.equal(finish, 'stop');
      if (includeUsage) assert.deepEqual(usage, whole.usage);
      else assert.equal(usage, null);
    }
  });

  test('stream helper: content events and finalChatCompletion', async () => {
    const c = client();
    const whole = await c.chat.completions.create(params('gpt-4o-mini'));
    const want = whole.choices[0].message.content;
    const stream = c.chat.completions.stream({ ...params('gpt-4o-mini'), stream_options: { include_usage: true } });
    let deltas = '';
    const done = [];
    stream.on('content', (delta) => { deltas += delta; });
    stream.on('content.done', (e) => { done.push(e.content); });
    const final = await stream.finalChatCompletion();
    assert.equal(deltas, want);
    assert.deepEqual(done, [want], 'content.done fires once with the whole content');
    assert.equal(final.choices[0].message.content, want);
    assert.equal(final.choices[0].finish_reason, 'stop');
    assert.equal(await stream.finalContent(), want);
    assert.deepEqual(final.usage, whole.usage);
  });
});

describe('embeddings', () => {
  test('success, base64 decoded by the SDK', async () => {
    const c = client();
    const got = await c.embeddings.create({ model: 'gpt-4o-mini', input: ['hello world', 'bye'], encoding_format: 'float' });
    assert.equal(got.data.length, 2);
    assert.deepEqual(got.usage, { prompt_tokens: 3, total_tokens: 3 });
    for (const [i, d] of got.data.entries()) {
      assert.equal(d.index, i);
      assert.equal(d.embedding.length, 16);
    }
    // The SDK asks for base64 by default and decodes it to floats.
    const again = await c.embeddings.create({ model: 'gpt-4o-mini', input: 'hello world' });
    assert.deepEqual(again.data[0].embedding.map(Math.fround), got.data[0].embedding.map(Math.fround));
  });
});

describe('responses', () => {
  test('success, a stream, and the stream helper', async () => {
    const c = client();
    const whole = await c.responses.create({ model: 'gpt-4o-mini', input: 'Say hello in four words' });
    assert.equal(whole.status, 'completed');
    assert.ok(whole.output_text.startsWith('[backend stub, model stub-1]'), whole.output_text);
    assert.equal(whole.usage.output_tokens, 8);
    assert.match(whole._request_id, madeID);
    let deltas = '';
    let completed = null;
    for await (const ev of await c.responses.create({ model: 'gpt-4o-mini', input: 'Say hello in four words', stream: true })) {
      if (ev.type === 'response.output_text.delta') deltas += ev.delta;
      if (ev.type === 'response.completed') completed = ev.response;
    }
    assert.equal(deltas, whole.output_text);
    assert.equal(completed?.usage.output_tokens, 8);
    const stream = c.responses.stream({ model: 'gpt-4o-mini', input: 'Say hello in four words' });
    const final = await stream.finalResponse();
    assert.equal(final.output_text, whole.output_text);
  });
});

describe('models', () => {
  test('list', async () => {
    const ids = [];
    for await (const m of client().models.list()) {
      ids.push(m.id);
      assert.equal(m.object, 'model');
      assert.ok(m.owned_by);
      assert.equal(typeof m.created, 'number');
    }
    for (const want of ['gpt-4o-mini', slashModel, 'stub-1', 'narrow-1']) {
      assert.ok(ids.includes(want), `${ids} lacks ${want}`);
    }
  });

  test('retrieve', async () => {
    for (const id of ['gpt-4o-mini', 'stub-1', slashModel]) {
      const m = await client().models.retrieve(id);
      assert.equal(m.id, id);
      assert.equal(m.owned_by, 'stub');
    }
  });
});

// The narrow backend admits one request at a time: of three completions
// sent together the third leaves the line with 429 and Retry-After: 1
// (timings in reconfd_test.go).
describe('429', () => {
  function narrowCalls(maxRetries) {
    return Promise.all([0, 1, 2].map(async () => {
      const tries = [];
      const c = client({
        maxRetries,
        fetch: async (url, init) => {
          const t = { retryCount: new Headers(init.headers).get('x-stainless-retry-count'), sent: Date.now() };
          const res = await fetch(url, init);
          Object.assign(t, { got: Date.now(), status: res.status });
          tries.push(t);
          return res;
        },
      });
      try {
        await c.chat.completions.create(params('narrow'));
        return { tries, err: null };
      } catch (err) {
        return { tries, err };
      }
    }));
  }

  test('RateLimitError without retries', async () => {
    const calls = await narrowCalls(0);
    const limited = calls.filter((c) => c.err);
    assert.equal(limited.length, 1, 'the third in line gets 429');
    const err = await rejectsWith(Promise.reject(limited[0].err), OpenAI.RateLimitError, 429, 'backend_busy');
    assert.equal(err.headers.get('retry-after'), '1');
    assert.match(err.requestID, madeID);
    assert.equal(limited[0].tries.length, 1);
  });

  test('retried after Retry-After, retries counted', async () => {
    const calls = await narrowCalls(2);
    let retried = 0;
    for (const { tries, err } of calls) {
      assert.equal(err, null);
      tries.forEach((t, i) => {
        assert.equal(t.retryCount, String(i));
        assert.equal(t.status, i === tries.length - 1 ? 200 : 429);
        if (i > 0) {
          retried++;
          assert.ok(t.sent - tries[i - 1].got >= 1000, 'retried before the Retry-After second');
        }
      });
    }
    assert.ok(retried > 0, 'no call was retried');
    console.log(`retries counted: ${retried}`);
  });
});
