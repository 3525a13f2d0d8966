//! A tournament (loser) tree over the heads of sorted sequences: which
//! sequence's head comes next, in one comparison per level when a head is
//! taken and the sequence's next put in (a binary heap's pop and push take
//! about three). The shard's merge of its CPUs' sub-streams and the
//! combiner's merge of the shards' deltas, both once per event, use it.
//!
//! Heads compare by key, then by sequence: equal keys come out in the
//! order of their sequences.

/// The tree over the heads of `n` sequences.
pub struct Tournament<K> {
    /// Each sequence's head key (`None` once it has ended), then `None`s
    /// up to a power of two of leaves.
    keys: Vec<Option<K>>,
    /// The inner nodes (1-based: node `j`'s children are `2j` and `2j + 1`,
    /// leaf `i` is node `keys.len() + i`): the loser of the match there.
    losers: Vec<usize>,
    /// The sequence whose head comes first.
    winner: usize,
}

impl<K: Ord + Copy> Tournament<K> {
    /// The tree over sequences whose heads are `heads` (`None`: empty).
    pub fn new(heads: impl IntoIterator<Item = Option<K>>) -> Self {
        let mut keys: Vec<Option<K>> = heads.into_iter().collect();
        keys.resize(keys.len().max(1).next_power_of_two(), None);
        let mut t = Tournament {
            losers: vec![0; keys.len()],
            keys,
            winner: 0,
        };
        t.winner = t.play(1);
        t
    }

    /// The sequence whose head comes first; `None` once all have ended.
    #[inline]
    pub fn winner(&self) -> Option<usize> {
        self.keys[self.winner].is_some().then_some(self.winner)
    }

    /// The winner's head was taken: `next` is its sequence's new head
    /// (`None`: the sequence has ended).
    #[inline]
    pub fn replace_winner(&mut self, next: Option<K>) {
        let mut win = self.winner;
        self.keys[win] = next;
        let mut j = (self.keys.len() + win) / 2;
        while j > 0 {
            // Without a branch: which head wins is data, and mispredicted
            // branches cost more than the few moves.
            let other = self.losers[j];
            let swap = self.beats(other, win);
            self.losers[j] = if swap { win } else { other };
            win = if swap { other } else { win };
            j /= 2;
        }
        self.winner = win;
    }

    /// Whether sequence `a`'s head comes before `b`'s.
    #[inline]
    fn beats(&self, a: usize, b: usize) -> bool {
        let (x, y) = (&self.keys[a], &self.keys[b]);
        // `None` (ended) after every key.
        (x.is_none(), x, a) < (y.is_none(), y, b)
    }

    /// Plays the matches under node `j`, keeping each one's loser, and
    /// returns the winner.
    fn play(&mut self, j: usize) -> usize {
        let leaves = self.keys.len();
        if j >= leaves {
            return j - leaves;
        }
        let (a, b) = (self.play(2 * j), self.play(2 * j + 1));
        let (win, lose) = if self.beats(b, a) { (b, a) } else { (a, b) };
        self.losers[j] = lose;
        win
    }
}

#[cfg(test)]
mod tests {
    use super::Tournament;

    /// Merges the lists through the tree, as (key, list) pairs.
    fn merged(lists: &[Vec<u32>]) -> Vec<(u32, usize)> {
        let mut at = vec![0; lists.len()];
        let mut t = Tournament::new(lists.iter().map(|l| l.first().copied()));
        let mut out = Vec::new();
        while let Some(i) = t.winner() {
            out.push((lists[i][at[i]], i));
            at[i] += 1;
            t.replace_winner(lists[i].get(at[i]).copied());
        }
        out
    }

    #[test]
    fn merges_in_key_order_ties_by_sequence() {
        // Sizes that are and are not powers of two, empty lists, ties.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for n in 0..12 {
            let lists: Vec<Vec<u32>> = (0..n)
                .map(|i| {
                    let len = (i * 7) % 5 * 3;
                    let mut l: Vec<u32> = (0..len)
                        .map(|_| {
                            seed ^= seed << 13;
                            seed ^= seed >> 7;
                            seed ^= seed << 17;
                            (seed % 20) as u32
                        })
                        .collect();
                    l.sort_unstable();
                    l
                })
                .collect();
            let mut want: Vec<(u32, usize)> = lists
                .iter()
                .enumerate()
                .flat_map(|(i, l)| l.iter().map(move |&k| (k, i)))
                .collect();
            // Stable: within a list, its own order.
            want.sort_by_key(|&(k, i)| (k, i));
            assert_eq!(merged(&lists), want, "{n} lists");
        }
    }

    #[test]
    fn no_sequences_has_no_winner() {
        let t: Tournament<u8> = Tournament::new([]);
        assert_eq!(t.winner(), None);
    }
}
