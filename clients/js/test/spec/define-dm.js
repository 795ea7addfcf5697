io.agents.dm = new io.Agent('dm', {
  systemPrompt: 'You are the dungeon master. Keep the story straight.',
  memory: {},
})
