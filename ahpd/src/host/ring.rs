//! The replay ring: the last envelopes the host sent, kept for clients that reconnect, packed side
//! by side into blocks of text. Envelopes outlive the bursts of work around them; held as one
//! allocation each they end up spread over the whole heap and pin pages the allocator could
//! otherwise give back once the burst is over (the load run measured tens of MiB so pinned).

use std::collections::{HashSet, VecDeque};

/// The size of one block of envelopes (an envelope larger than this gets a block of its own).
const BLOCK_BYTES: usize = 64 * 1024;

/// Entries a block makes room for at first (envelopes are a few hundred bytes).
const ENTRIES_PER_BLOCK: usize = BLOCK_BYTES / 256;

/// One envelope: its number, and where its channel and its JSON sit in the block's text.
struct Entry {
    seq: u64,
    channel_at: u32,
    envelope_at: u32,
    end: u32,
}

struct Block {
    text: String,
    entries: Vec<Entry>,
}

impl Block {
    fn with_room_for(bytes: usize) -> Self {
        Self { text: String::with_capacity(BLOCK_BYTES.max(bytes)), entries: Vec::with_capacity(ENTRIES_PER_BLOCK) }
    }

    fn room(&self) -> usize {
        self.text.capacity() - self.text.len()
    }

    fn channel(&self, entry: &Entry) -> &str {
        self.text.get(entry.channel_at as usize..entry.envelope_at as usize).unwrap_or_default()
    }

    fn envelope(&self, entry: &Entry) -> &str {
        self.text.get(entry.envelope_at as usize..entry.end as usize).unwrap_or_default()
    }
}

/// The last `capacity` envelopes, oldest first.
pub struct ReplayRing {
    blocks: VecDeque<Block>,
    /// Entries at the head of the first block that are gone already.
    dropped: usize,
    len: usize,
    capacity: usize,
}

impl ReplayRing {
    /// An empty ring that keeps `capacity` envelopes (at least one).
    pub fn new(capacity: usize) -> Self {
        Self { blocks: VecDeque::new(), dropped: 0, len: 0, capacity: capacity.max(1) }
    }

    /// How many envelopes it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps an envelope, letting the oldest go past the capacity.
    pub fn push(&mut self, seq: u64, channel: &str, envelope: &str) {
        let needed = channel.len() + envelope.len();
        if self.blocks.back().is_none_or(|b| b.room() < needed) {
            self.blocks.push_back(Block::with_room_for(needed));
        }
        let Some(block) = self.blocks.back_mut() else { return };
        let at = |len: usize| u32::try_from(len).unwrap_or(u32::MAX);
        let channel_at = at(block.text.len());
        block.text.push_str(channel);
        let envelope_at = at(block.text.len());
        block.text.push_str(envelope);
        block.entries.push(Entry { seq, channel_at, envelope_at, end: at(block.text.len()) });
        self.len += 1;
        while self.len > self.capacity {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        let Some(first) = self.blocks.front() else { return };
        self.dropped += 1;
        self.len -= 1;
        if self.dropped >= first.entries.len() {
            self.blocks.pop_front();
            self.dropped = 0;
        }
    }

    /// The oldest envelope's number.
    pub fn oldest_seq(&self) -> Option<u64> {
        self.blocks.front().and_then(|b| b.entries.get(self.dropped)).map(|e| e.seq)
    }

    /// The envelopes numbered after `after` on the given channels, oldest first, as one JSON array.
    pub fn json_after(&self, after: u64, channels: &HashSet<String>) -> String {
        let mut out = String::from("[");
        for (i, block) in self.blocks.iter().enumerate() {
            let skip = if i == 0 { self.dropped } else { 0 };
            for entry in block.entries.iter().skip(skip) {
                if entry.seq > after && channels.contains(block.channel(entry)) {
                    if out.len() > 1 {
                        out.push(',');
                    }
                    out.push_str(block.envelope(entry));
                }
            }
        }
        out.push(']');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channels(list: &[&str]) -> HashSet<String> {
        list.iter().map(|c| (*c).to_owned()).collect()
    }

    #[test]
    fn keeps_the_last_envelopes_and_answers_those_after_a_number_on_the_channels_asked() {
        let mut ring = ReplayRing::new(3);
        for seq in 1..=5 {
            let channel = if seq % 2 == 0 { "b" } else { "a" };
            ring.push(seq, channel, &format!("{{\"n\":{seq}}}"));
        }
        assert_eq!(ring.len(), 3);
        assert_eq!(ring.oldest_seq(), Some(3));
        assert_eq!(ring.json_after(2, &channels(&["a", "b"])), r#"[{"n":3},{"n":4},{"n":5}]"#);
        assert_eq!(ring.json_after(3, &channels(&["a"])), r#"[{"n":5}]"#);
        assert_eq!(ring.json_after(5, &channels(&["a"])), "[]");
    }

    #[test]
    fn blocks_go_once_every_envelope_in_them_has() {
        let big = "x".repeat(BLOCK_BYTES / 4);
        let mut ring = ReplayRing::new(6);
        for seq in 1..=20 {
            ring.push(seq, "c", &big);
        }
        assert_eq!(ring.len(), 6);
        assert_eq!(ring.oldest_seq(), Some(15));
        // Three envelopes fill a block, so six live in at most three blocks.
        assert!(ring.blocks.len() <= 3, "{} blocks", ring.blocks.len());
        let json = ring.json_after(0, &channels(&["c"]));
        assert_eq!(json.matches(&big).count(), 6);
    }

    #[test]
    fn an_envelope_larger_than_a_block_gets_its_own() {
        let huge = "y".repeat(BLOCK_BYTES * 2);
        let mut ring = ReplayRing::new(10);
        ring.push(1, "c", "1");
        ring.push(2, "c", &huge);
        ring.push(3, "c", "3");
        assert_eq!(ring.json_after(0, &channels(&["c"])), format!("[1,{huge},3]"));
    }
}
