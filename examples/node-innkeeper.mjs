#!/usr/bin/env node
// A player at the inn's counter, in a terminal: the innkeeper hands over
// what the player asks for through a tool the game runs, give_item, and
// the game keeps the stock and the player's pack (the studio never sees
// them: it hears what give_item answered).
//
//   make run                                          # prints an API key
//   STUDIO_KEY=sk_… node examples/node-innkeeper.mjs
//
// STUDIO_URL (default http://127.0.0.1:8000) and STUDIO_AGENT (default
// innkeeper) say which studio and which character. /pack shows what you
// carry, /quit leaves. On the offline `scripted` model (make run's), which
// only quotes you, `/ask ITEM` has it call give_item as a real model would.

import { stdin as input, stdout as output } from 'node:process'
import * as readline from 'node:readline/promises'

import { StudioError, connect } from '../clients/js/index.js'

if (!process.env.STUDIO_KEY) {
  console.error('Set STUDIO_KEY to an API key of the game (make run prints one).')
  process.exit(1)
}
const io = connect({ url: process.env.STUDIO_URL ?? 'http://127.0.0.1:8000', key: process.env.STUDIO_KEY })

// The game's state, and the one way the innkeeper changes it.
const stock = { key: 1, ale: 3, lantern: 1 }
const pack = []

function giveItem({ item }) {
  if (!stock[item]) {
    const left = Object.keys(stock).filter((name) => stock[name] > 0)
    throw new Error(`There is no ${item} left to give. The stock has: ${left.join(', ') || 'nothing'}.`)
  }
  stock[item] -= 1
  pack.push(item)
  return { given: item, pack }
}

io.agents.innkeeper = new io.Agent(process.env.STUDIO_AGENT ?? 'innkeeper', {
  systemPrompt:
    'You keep the Drowned Bell inn. When the player asks for something from the stock, hand it ' +
    'over with give_item, then tell them what they got; if give_item says there is none, say so.',
  tools: {
    give_item: {
      description: "Hand the player one item from the inn's stock: key, ale or lantern.",
      parameters: { type: 'object', properties: { item: { type: 'string' } }, required: ['item'] },
      timeoutSeconds: 10,
      run: giveItem,
    },
  },
})

async function main() {
  const innkeeper = io.agents.innkeeper
  let agent
  try {
    agent = await innkeeper.ready
  } catch (error) {
    console.error(error.message)
    process.exitCode = 1
    return
  }
  const scripted = agent.model === 'scripted'
  output.write(`The innkeeper (${agent.model}) looks up from the counter. Say something.\n`)
  output.write('  /pack  what you carry    /quit  leave\n')
  if (scripted) output.write("  /ask ITEM  ask for key, ale or lantern (the offline 'scripted' model only quotes you otherwise)\n")

  const terminal = readline.createInterface({ input, output, terminal: input.isTTY, prompt: '\n> ' })
  const lines = terminal[Symbol.asyncIterator]()
  for (;;) {
    terminal.prompt()
    const { value: line, done } = await lines.next()
    if (done || line.trim() === '/quit') break
    if (!line.trim()) continue
    if (line.trim() === '/pack') {
      output.write(`  you carry: ${pack.join(', ') || 'nothing'}\n`)
      continue
    }
    let message = line
    const ask = scripted && line.match(/^\/ask\s+(\S+)$/)
    if (ask) {
      const [, item] = ask
      message = JSON.stringify({ script: [{ call: 'give_item', args: { item } }, { say: 'The innkeeper reaches under the counter.' }] })
    }
    try {
      const turn = await innkeeper.send(message, { onText: (text) => output.write(text) })
      output.write('\n')
      for (const call of turn.toolCalls) {
        output.write(`  (${call.name} ${call.arguments.item ?? ''}: ${call.isError ? 'refused: ' : ''}${call.result})\n`)
      }
      if (turn.status !== 'completed') output.write(`  (the turn ${turn.status}: ${turn.error ?? ''})\n`)
    } catch (error) {
      if (error instanceof StudioError) output.write(`\n  (the studio said: ${error.message})\n`)
      else throw error
    }
  }
  terminal.close()
  output.write(`\nYou leave with: ${pack.join(', ') || 'nothing'}.\n`)
}

await main()
