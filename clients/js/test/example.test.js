// examples/node-game-loop.mjs, played through its terminal: a message, a
// note the scripted model writes as a memory, the memories, and goodbye;
// examples/node-innkeeper.mjs: items handed over through the game's tool.

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { test } from 'node:test'

import { studio, uniqueName } from './support.js'

const EXAMPLE = fileURLToPath(new URL('../../../examples/node-game-loop.mjs', import.meta.url))
const INNKEEPER = fileURLToPath(new URL('../../../examples/node-innkeeper.mjs', import.meta.url))

function play(lines, env, example = EXAMPLE) {
  return new Promise((resolve, reject) => {
    const game = spawn(process.execPath, [example], { env: { ...process.env, ...env } })
    let out = ''
    game.stdout.on('data', (chunk) => (out += chunk))
    game.stderr.on('data', (chunk) => (out += chunk))
    game.on('error', reject)
    game.on('close', (code) => resolve({ code, out }))
    game.stdin.end(lines.map((line) => `${line}\n`).join(''))
  })
}

test('the game loop streams the dungeon master\'s replies and shows what it remembers', async () => {
  const { code, out } = await play(
    ['I ask the ferryman about the bells.', '/note quest Find the silver key.', '/memories', '/quit'],
    { STUDIO_URL: studio.url, STUDIO_KEY: studio.key, STUDIO_AGENT: uniqueName('dm') },
  )

  assert.equal(code, 0, out)
  assert.ok(out.includes('You said: "I ask the ferryman about the bells."'), out)
  assert.ok(out.includes('I will remember that (quest).\n  (close_memory quest)'), out)
  assert.ok(out.includes('closed  quest — Noted by the player: quest'), out)
  assert.ok(out.endsWith('Farewell.\n'), out)
})

test('the game loop without a key says what to do', async () => {
  const { code, out } = await play([], { STUDIO_URL: studio.url, STUDIO_KEY: '' })

  assert.equal(code, 1)
  assert.match(out, /Set STUDIO_KEY/)
})

test('the innkeeper hands over items through give_item, and the game keeps the pack', async () => {
  const { code, out } = await play(
    ['/ask key', '/ask key', '/ask ale', '/pack', '/quit'],
    { STUDIO_URL: studio.url, STUDIO_KEY: studio.key, STUDIO_AGENT: uniqueName('inn') },
    INNKEEPER,
  )

  assert.equal(code, 0, out)
  assert.ok(out.includes('(give_item key: {"given": "key", "pack": ["key"]})'), out)
  assert.ok(out.includes('(give_item key: refused: There is no key left to give. The stock has: ale, lantern.)'), out)
  assert.ok(out.includes('(give_item ale: {"given": "ale", "pack": ["key", "ale"]})'), out)
  assert.ok(out.includes('you carry: key, ale'), out)
  assert.ok(out.endsWith('You leave with: key, ale.\n'), out)
})
