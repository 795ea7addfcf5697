// Game code that fails early: an agent's options are checked when it is
// constructed — names and JSON types, against the studio's own definition
// schema that the client ships — with a did-you-mean, before anything is
// sent; and a definition that fails in the background is reported even
// when nothing awaits `ready`.

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { test } from 'node:test'

import { StudioError, connect } from '../index.js'
import { raw, recordingFetch, studio, uniqueName } from './support.js'

const UNHEEDED = fileURLToPath(new URL('./fixtures/unheeded-definition.mjs', import.meta.url))

function refusal(options) {
  const recording = recordingFetch()
  const io = connect({ ...studio, fetch: recording.fetch })
  let thrown = null
  try {
    new io.Agent('inn3', options)
  } catch (error) {
    thrown = error
  }
  assert.ok(thrown instanceof StudioError, `constructed with ${JSON.stringify(options)}`)
  assert.deepEqual(recording.calls, [], 'nothing was sent')
  return thrown
}

test('a misspelt option is refused at construction with the option it likely meant', () => {
  const error = refusal({ systemPromt: 'You keep the inn.' })

  assert.equal(error.status, 400)
  assert.equal(error.code, 'invalid_definition')
  assert.equal(error.message, "new io.Agent('inn3', options): systemPromt: is not an option; did you mean 'systemPrompt'?")
  assert.deepEqual(error.details, [{ field: 'systemPromt', message: "is not an option; did you mean 'systemPrompt'?" }])
})

test('a value of the wrong JSON type is refused at construction, naming the field', () => {
  const error = refusal({ systemPrompt: 'You keep the inn.', compaction: { maxTokens: '8000' } })

  assert.deepEqual(error.details, [{ field: 'compaction.maxTokens', message: 'must be a whole number, not the string "8000"' }])
})

test('misplaced, snake_case and nested names get the name they likely meant', () => {
  const fields = (options) => refusal(options).details.map((problem) => `${problem.field}: ${problem.message}`)

  assert.deepEqual(fields({ maxTokens: 8000, system_prompt: 'x' }), [
    "maxTokens: is not an option; did you mean 'compaction.maxTokens'?",
    "system_prompt: is not an option; did you mean 'systemPrompt'?",
  ])
  assert.deepEqual(fields({ memory: { maxOpenToken: 1000 }, compaction: { type: 'sliding_window' } }), [
    "memory.maxOpenToken: is not an option; did you mean 'maxOpenTokens'?",
    'compaction.type: "sliding_window" is not a valid choice; the choices are "summarize", "sliding-window"; did you mean "sliding-window"?',
  ])
  assert.deepEqual(fields({ tools: { give_item: { descripton: 'Hand over an item.', run: () => 'ok' } } }), [
    "tools.give_item.descripton: is not an option; did you mean 'description'?",
    'tools.give_item.description: is required',
  ])
  assert.deepEqual(fields({ model: 4, memory: [] }), ['model: must be a string, not the number 4', 'memory: must be an object, not a list'])
})

test('what the client refuses, the studio refuses too, field for field', async () => {
  for (const options of [{ systemPromt: 'x' }, { compaction: { maxTokens: '8000' } }, { memory: { maxOpenToken: 5 } }]) {
    const mine = refusal(options)
    const theirs = await raw('PUT', `/api/v1/agents/${uniqueName('inn')}`, options)

    assert.equal(theirs.status, mine.status)
    assert.equal(theirs.body.error.code, mine.code)
    assert.deepEqual(
      theirs.body.error.details.map((problem) => problem.field),
      mine.details.map((problem) => problem.field),
    )
  }
})

test('every option the studio takes, with its type, constructs and is defined', async () => {
  const io = connect(studio)
  const agent = new io.Agent(uniqueName('inn'), {
    systemPrompt: 'You keep the inn.',
    model: 'scripted',
    memory: { maxOpenTokens: 1000 },
    compaction: { type: 'sliding-window', maxTokens: 8000 },
    tools: { give_item: { description: 'Hand over an item.', parameters: { type: 'object' }, timeoutSeconds: 30, run: () => 'ok' } },
  })
  const memoryOff = new io.Agent(uniqueName('inn'), { memory: null, tools: null, compaction: undefined })

  assert.equal((await agent.ready).compaction.type, 'sliding-window')
  assert.equal((await memoryOff.ready).memory, null)
})

function run(script, env) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script], { env: { ...process.env, ...env } })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => (stdout += chunk))
    child.stderr.on('data', (chunk) => (stderr += chunk))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

test('a definition refused in the background while nothing awaits ready is written to stderr', async () => {
  const name = uniqueName('inn')

  const { code, stderr } = await run(UNHEEDED, { STUDIO_URL: studio.url, STUDIO_KEY: studio.key, STUDIO_AGENT: name })

  // The behaviour the README documents: reported on stderr; the process is the game's to end.
  assert.equal(code, 0, stderr)
  assert.match(stderr, new RegExp(`the definition of agent '${name}' failed \\(invalid_definition\\): .*nobody:no-model`))
  assert.match(stderr, /its next send rejects with this error/)
})

test('a refusal game code awaits is its own to report: nothing is written to stderr', async () => {
  const { code, stdout, stderr } = await run(UNHEEDED, {
    STUDIO_URL: studio.url,
    STUDIO_KEY: studio.key,
    STUDIO_AGENT: uniqueName('inn'),
    HEED: '1',
  })

  assert.equal(code, 0, stderr)
  assert.equal(stdout, 'handled: invalid_definition\n')
  assert.equal(stderr, '')
})

test('the next send of an agent whose definition failed unheeded rejects with that error, and its key', async () => {
  const io = connect(studio)
  const agent = new io.Agent(uniqueName('inn'), { model: 'nobody:no-model' })

  await assert.rejects(agent.send('Hello?', { idempotencyKey: 'hello-1' }), (error) => {
    assert.ok(error instanceof StudioError)
    assert.equal(error.code, 'invalid_definition')
    assert.match(error.message, /nobody:no-model/)
    assert.equal(error.idempotencyKey, 'hello-1')
    return true
  })
  await assert.rejects(agent.send('Hello?', { idempotencyKey: 'hello-2' }), { idempotencyKey: 'hello-2' })
})
