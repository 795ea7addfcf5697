// Throws at definition time: 4000 is not below 8000 / 2.
new io.Agent('dm', { memory: {}, compaction: { type: 'summarize', maxTokens: 8000 } })
