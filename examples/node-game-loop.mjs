#!/usr/bin/env node
// A player typing to the dungeon master in a terminal, the replies streamed.
//
//   make run                                          # prints an API key
//   STUDIO_KEY=sk_… node examples/node-game-loop.mjs
//
// STUDIO_URL (default http://127.0.0.1:8000) and STUDIO_AGENT (default dm)
// say which studio and which character. Ctrl-C stops a reply as it streams
// (and cancels its turn); at the prompt it ends the game, as /quit does.

import { stdin as input, stdout as output } from 'node:process'
import * as readline from 'node:readline/promises'

import { StudioError, connect } from '../clients/js/index.js'

if (!process.env.STUDIO_KEY) {
  console.error('Set STUDIO_KEY to an API key of the game (make run prints one).')
  process.exit(1)
}
const io = connect({ url: process.env.STUDIO_URL ?? 'http://127.0.0.1:8000', key: process.env.STUDIO_KEY })

io.agents.dm = new io.Agent(process.env.STUDIO_AGENT ?? 'dm', {
  memory: {},
  systemPrompt: `You are the dungeon master of a drowned-coast adventure. Keep the story straight.

  Keep a memory named \`quest\` open at all times: what the player is trying to do right
  now and why. Update it whenever their goal changes.

  Keep \`npcs\` (everyone they have met and how that meeting went) as a closed memory.
  Open it when the scene turns to someone, write what changed, and close it again.`,
})

async function main() {
  const dm = io.agents.dm
  let agent
  try {
    agent = await dm.ready
  } catch (error) {
    console.error(error.message)
    process.exitCode = 1
    return
  }
  const scripted = agent.model === 'scripted'
  output.write(`You stand before ${agent.name}, the dungeon master (${agent.model}). Say something.\n`)
  output.write('  /memories  what the dungeon master remembers    /quit  leave\n')
  if (scripted) {
    output.write("  /note NAME TEXT  have it write a memory (the offline 'scripted' model only quotes you otherwise)\n")
  }

  const terminal = readline.createInterface({ input, output, terminal: input.isTTY, prompt: '\n> ' })
  let replying = null // the AbortController of the reply streaming now
  terminal.on('SIGINT', () => (replying ? replying.abort() : terminal.close()))
  const lines = terminal[Symbol.asyncIterator]()

  for (;;) {
    terminal.prompt()
    const { value: line, done } = await lines.next()
    if (done || line.trim() === '/quit') break
    if (!line.trim()) continue
    if (line.trim() === '/memories') {
      await showMemories(dm)
      continue
    }
    let message = line
    const note = scripted && line.match(/^\/note\s+(\S+)\s+(.+)$/)
    if (note) {
      const [, name, content] = note
      const write = { call: 'close_memory', args: { name, description: `Noted by the player: ${name}`, content } }
      message = JSON.stringify({ script: [write, { say: `I will remember that (${name}).` }] })
    }

    replying = new AbortController()
    try {
      const turn = await dm.send(message, { onText: (text) => output.write(text), signal: replying.signal })
      output.write('\n')
      for (const call of turn.toolCalls) {
        output.write(`  (${call.name} ${call.arguments.name ?? ''}${call.isError ? ': refused' : ''})\n`)
      }
      if (turn.status !== 'completed') output.write(`  (the turn ${turn.status}: ${turn.error ?? ''})\n`)
    } catch (error) {
      if (error.name === 'AbortError') output.write('\n  (you cut the dungeon master off)\n')
      else if (error instanceof StudioError) output.write(`\n  (the studio said: ${error.message})\n`)
      else throw error
    } finally {
      replying = null
    }
  }
  terminal.close()
  output.write('\nFarewell.\n')
}

async function showMemories(dm) {
  const store = await dm.memories()
  if (!store.memories.length) output.write('  (nothing yet)\n')
  for (const memory of store.memories) {
    output.write(`  ${memory.open ? 'open  ' : 'closed'}  ${memory.name} — ${memory.description}\n`)
    if (memory.open) output.write(`          ${memory.content.replace(/\n/g, '\n          ')}\n`)
  }
}

await main()
