// The spec's JavaScript examples (shared/spec/agent-memory.md), run as the
// spec writes them: each is a file in spec/, copied verbatim, run with only
// `io` made first.

import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import { test } from 'node:test'

import { StudioError, connect } from '../index.js'
import { raw, recordingFetch, studio } from './support.js'

const EXAMPLES = ['define-dm', 'throws', 'two-fixes', 'prompt']
const example = (name) => readFileSync(new URL(`./spec/${name}.js`, import.meta.url), 'utf8')

/** Run an example as the spec has it, with `io` in scope. */
function run(name, io) {
  return new Function('io', example(name))(io)
}

function io() {
  const recording = recordingFetch()
  return { io: connect({ ...studio, fetch: recording.fetch }), calls: recording.calls }
}

const definitions = (calls) => calls.filter((call) => call.method === 'PUT')

// The spec lives beside the repository (../shared), or where STUDIO_SPEC says.
const SPEC = process.env.STUDIO_SPEC || new URL('../../../../shared/spec/agent-memory.md', import.meta.url).pathname

test('the examples here are the spec\'s, word for word', { skip: !existsSync(SPEC) && `no spec at ${SPEC}` }, () => {
  const spec = readFileSync(SPEC, 'utf8')
  for (const name of EXAMPLES) assert.ok(spec.includes(example(name).trimEnd()), `spec/${name}.js is not in the spec`)
})

test('io.agents.dm = new io.Agent(…) defines the dungeon master, memory on with every default', async () => {
  const { io: game } = io()

  run('define-dm', game)

  const agent = await game.agents.dm.ready
  assert.equal(agent.name, 'dm')
  assert.equal(agent.systemPrompt, 'You are the dungeon master. Keep the story straight.')
  assert.deepEqual(agent.memory, { maxOpenTokens: 4000 })
  assert.deepEqual(agent.compaction, { type: 'summarize', maxTokens: 32000 })
})

test('maxOpenTokens 4000 beside maxTokens 8000 throws at definition time, in the studio\'s words', async () => {
  const { io: game, calls } = io()

  let thrown
  try {
    run('throws', game)
  } catch (error) {
    thrown = error
  }

  assert.ok(thrown instanceof StudioError, `threw ${thrown}`)
  assert.equal(thrown.code, 'invalid_definition')
  assert.equal(thrown.status, 400)
  assert.match(thrown.message, /4,000.*below half.*8,000/)
  assert.deepEqual(calls, []) // nothing was sent
  // The studio says the same of the same definition.
  const answer = await raw('PUT', '/api/v1/agents/dm', { memory: {}, compaction: { type: 'summarize', maxTokens: 8000 } })
  assert.equal(answer.status, 400)
  assert.equal(answer.body.error.code, thrown.code)
  assert.equal(answer.body.error.message, thrown.message)
})

test('either fix is accepted: more room, or less of it for memories', async () => {
  const { io: game, calls } = io()

  run('two-fixes', game)

  // The same options again send nothing: this is the last definition's answer.
  const agent = await new game.Agent('dm', { memory: { maxOpenTokens: 1000 }, compaction: { type: 'summarize', maxTokens: 8000 } }).ready
  assert.deepEqual(
    definitions(calls).map((call) => call.status < 300),
    [true, true],
  )
  assert.deepEqual(agent.memory, { maxOpenTokens: 1000 })
  assert.deepEqual(agent.compaction, { type: 'summarize', maxTokens: 8000 })
})

test('the prompting example defines a dungeon master that keeps quest, npcs and world', async () => {
  const { io: game, calls } = io()

  run('prompt', game)
  await eventually(() => definitions(calls).some((call) => call.status !== null))
  run('prompt', game) // as at the top of every event handler: sends nothing more
  await new Promise((resolve) => setImmediate(resolve))

  assert.deepEqual(
    definitions(calls).map((call) => call.status < 300),
    [true],
  )
  const { body } = await raw('GET', '/api/v1/agents/dm')
  assert.ok(body.systemPrompt.startsWith('You are the dungeon master…\n\n  Keep a memory named `quest` open'))
  assert.ok(body.systemPrompt.includes('`npcs`') && body.systemPrompt.includes('`world`'))
  assert.deepEqual(body.memory, { maxOpenTokens: 4000 })
})

async function eventually(predicate) {
  while (!predicate()) await new Promise((resolve) => setTimeout(resolve, 20))
}
