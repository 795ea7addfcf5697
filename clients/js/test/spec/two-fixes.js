// Either give the agent more room…
new io.Agent('dm', { memory: {}, compaction: { type: 'summarize', maxTokens: 16000 } })
// …or take less of it for memories.
new io.Agent('dm', { memory: { maxOpenTokens: 1000 }, compaction: { type: 'summarize', maxTokens: 8000 } })
