// Definitions and their revisions: the agent's revision and ETag after
// `ready`, and `ifMatch` — a definition only over the revision game code
// last saw, refused (`definition_changed`) if anyone defined it since.

import assert from 'node:assert/strict'
import { test } from 'node:test'

import { StudioError, connect } from '../index.js'
import { raw, recordingFetch, studio, uniqueName } from './support.js'

const DM = { systemPrompt: 'You are the dungeon master.', memory: {} }

test('after ready the agent has the revision the studio defined it at, and its ETag', async () => {
  const io = connect(studio)
  const name = uniqueName('rev')

  const agent = new io.Agent(name, DM)
  assert.equal(agent.revision, null)
  const info = await agent.ready

  assert.equal(agent.revision, 1)
  assert.equal(agent.etag, '"1"')
  assert.equal(info.revision.number, 1)
  assert.equal(info.revision.via, 'api')
  assert.equal(info.revision.by.type, 'apiKey')
  assert.ok(!JSON.stringify(info).includes(studio.key.split('_').slice(2).join('_')), 'the key’s secret is never shown')
  const changed = new io.Agent(name, { ...DM, systemPrompt: 'You are the ferryman.' })
  await changed.ready
  assert.equal(changed.revision, 2)
})

test('ifMatch with the revision the agent is at defines it', async () => {
  const io = connect(studio)
  const name = uniqueName('rev')
  const first = new io.Agent(name, DM)
  await first.ready

  const second = new io.Agent(name, { ...DM, systemPrompt: 'You are the ferryman.' }, { ifMatch: first.revision })
  const third = new io.Agent(name, { ...DM, systemPrompt: 'You are the innkeeper.' }, { ifMatch: (await second.ready, second.etag) })
  await third.ready

  assert.equal(third.revision, 3)
  const { body } = await raw('GET', `/api/v1/agents/${name}`)
  assert.equal(body.systemPrompt, 'You are the innkeeper.')
})

test('ifMatch over a revision someone changed since is refused with definition_changed', async () => {
  const io = connect(studio)
  const name = uniqueName('rev')
  const mine = new io.Agent(name, DM)
  await mine.ready
  // A designer (here: other code) defines it meanwhile.
  assert.equal((await raw('PUT', `/api/v1/agents/${name}`, { ...DM, systemPrompt: 'Edited elsewhere.' })).status, 200)

  const stale = new io.Agent(name, { ...DM, systemPrompt: 'You are the ferryman.' }, { ifMatch: mine.revision })

  await assert.rejects(stale.ready, (error) => {
    assert.ok(error instanceof StudioError)
    assert.equal(error.code, 'definition_changed')
    assert.equal(error.status, 412)
    assert.match(error.message, /revision 2/)
    return true
  })
  assert.equal(stale.revision, null)
  const { body } = await raw('GET', `/api/v1/agents/${name}`)
  assert.equal(body.systemPrompt, 'Edited elsewhere.')
  await assert.rejects(stale.send('Hello.'), { code: 'definition_changed' })
})

test('a construction with ifMatch always sends its definition; one without sends the same options once', async () => {
  const recording = recordingFetch()
  const io = connect({ ...studio, fetch: recording.fetch })
  const name = uniqueName('rev')
  const first = new io.Agent(name, DM)
  await first.ready

  await new io.Agent(name, DM).ready
  await new io.Agent(name, DM, { ifMatch: '"1"' }).ready
  await new io.Agent(name, DM, { ifMatch: '*' }).ready

  const puts = recording.calls.filter((call) => call.method === 'PUT')
  assert.deepEqual(
    puts.map((call) => call.status),
    [201, 200, 200],
  )
})

test('an ifMatch that is no revision is refused at once', () => {
  const io = connect(studio)
  for (const ifMatch of [0, -1, 1.5, '', true, {}]) {
    assert.throws(() => new io.Agent(uniqueName('rev'), DM, { ifMatch }), TypeError)
  }
})
