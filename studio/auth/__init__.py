"""Who is calling and how much they may do: API keys, the API's authentication,
sign-in limits, and the sliding windows of every rate."""
