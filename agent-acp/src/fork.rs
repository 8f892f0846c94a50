//! A fork of an ACP conversation at one of its turns. ACP copies no conversation at a turn
//! (`session/fork`, unstable, copies all of it), so a fork is a new ACP session whose first prompt
//! opens with the source's turns through the kept one, in their own words: read back from what the
//! source's `session/load` replays, less the turns the fork leaves out (`Start.cut.dropped`).

use agent_runner::RESUMED;

/// One turn as the replay says it: the user's words, then the agent's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exchange {
    pub user: String,
    pub agent: String,
}

/// What a `session/load` replayed, turn by turn.
#[derive(Debug, Default)]
pub struct History {
    exchanges: Vec<Exchange>,
    /// The last chunk was the user's: the next one is the same message.
    in_user: bool,
    /// The user message being replayed is a lost turn's request again (`RESUMED`): the turn it
    /// resumed goes on, and its words are that turn's already.
    resuming: bool,
}

impl History {
    /// A chunk of a user message.
    pub fn user(&mut self, text: &str) {
        if !self.in_user {
            self.in_user = true;
            self.resuming = false;
            self.exchanges.push(Exchange::default());
        }
        if !self.resuming && text.starts_with(RESUMED) && self.exchanges.len() > 1 {
            self.exchanges.pop();
            self.resuming = true;
        }
        if let (false, Some(last)) = (self.resuming, self.exchanges.last_mut()) {
            push_paragraph(&mut last.user, text);
        }
    }

    /// A chunk of the agent's answer.
    pub fn agent(&mut self, text: &str) {
        self.in_user = false;
        if let Some(last) = self.exchanges.last_mut() {
            last.agent.push_str(text);
        }
    }

    /// The turns a fork keeps: all but the last `dropped`.
    pub fn kept(self, dropped: usize) -> Vec<Exchange> {
        let mut exchanges = self.exchanges;
        exchanges.truncate(exchanges.len().saturating_sub(dropped));
        exchanges
    }
}

fn push_paragraph(to: &mut String, text: &str) {
    if !to.is_empty() {
        to.push_str("\n\n");
    }
    to.push_str(text);
}

/// What opens the fork's first prompt: the kept turns, oldest first; none when nothing was kept.
pub fn context(kept: &[Exchange]) -> Option<String> {
    if kept.is_empty() {
        return None;
    }
    let mut out = String::from(
        "(This conversation goes on from an earlier one, forked after its last turn below. What was said in it, oldest first:)\n",
    );
    for exchange in kept {
        out.push_str(&format!("\n<user>\n{}\n</user>\n", exchange.user.trim()));
        out.push_str(&format!("<assistant>\n{}\n</assistant>\n", exchange.agent.trim()));
    }
    out.push_str("\n(The earlier conversation ends here; the new request follows.)");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(steps: &[(bool, &str)]) -> History {
        let mut history = History::default();
        for (user, text) in steps {
            if *user {
                history.user(text)
            } else {
                history.agent(text)
            }
        }
        history
    }

    #[test]
    fn a_fork_at_turn_two_of_three_keeps_the_first_two_turns_with_their_answers() {
        let history = replay(&[
            (true, "rules"),
            (true, "remember ALPHA"),
            (false, "ok "),
            (false, "ALPHA"),
            (true, "remember BRAVO"),
            (false, "ok BRAVO"),
            (true, "remember CHARLIE"),
            (false, "ok CHARLIE"),
        ]);
        let kept = history.kept(1);
        assert_eq!(
            kept,
            vec![
                Exchange { user: "rules\n\nremember ALPHA".into(), agent: "ok ALPHA".into() },
                Exchange { user: "remember BRAVO".into(), agent: "ok BRAVO".into() },
            ]
        );
        let text = context(&kept).expect("context");
        assert!(text.contains("remember ALPHA") && text.contains("ok BRAVO") && !text.contains("CHARLIE"), "{text}");
    }

    #[test]
    fn a_resumed_request_goes_on_with_the_turn_it_resumed() {
        let resumed = format!("{RESUMED}\n\ntell me a story");
        let history = replay(&[
            (true, "remember ALPHA"),
            (false, "ok"),
            (true, "tell me a story"),
            (false, "Once"),
            (true, &resumed),
            (false, " upon a time"),
            (true, "remember BRAVO"),
            (false, "ok"),
        ]);
        let kept = history.kept(1);
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert_eq!(kept[1], Exchange { user: "tell me a story".into(), agent: "Once upon a time".into() });
    }

    #[test]
    fn dropping_every_turn_keeps_no_context() {
        let history = replay(&[(true, "remember ALPHA"), (false, "ok")]);
        assert_eq!(context(&history.kept(3)), None);
    }
}
