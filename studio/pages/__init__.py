"""What every app's pages share (the members-only rule, live fragments, bars and
how long ago), and the studio's own pages: the games, a game's overview."""
