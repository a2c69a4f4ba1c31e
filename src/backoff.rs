//! The one backoff of the crate: the store's retries and the executor's polls of a call in flight
//! both pause this way.

use std::time::Duration;

/// Exponential backoff with "equal jitter": before attempt `n` (from 1), half of
/// `min(first * 2^(n-1), most)` plus a random share of the other half. The random half spreads
/// callers that began together, so they do not reach the store in step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    /// The delay before the second attempt (the first pause).
    pub(crate) first: Duration,
    /// The longest delay.
    pub(crate) most: Duration,
}

impl Backoff {
    /// The pause before `attempt`; `random(most)` draws a number of microseconds in `0..=most`.
    pub(crate) fn pause(&self, attempt: u32, random: impl FnOnce(u64) -> u64) -> Duration {
        let delay = self
            .first
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.most);
        let half = delay / 2;
        let most = u64::try_from(half.as_micros()).unwrap_or(u64::MAX);
        half + Duration::from_micros(random(most))
    }

    /// [`Backoff::pause`] with a uniformly random share.
    pub(crate) fn jittered(&self, attempt: u32) -> Duration {
        self.pause(attempt, |most| fastrand::u64(0..=most))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pause_is_between_half_and_all_of_a_doubling_capped_delay() {
        let b = Backoff {
            first: Duration::from_millis(25),
            most: Duration::from_millis(500),
        };
        let expected = [25, 50, 100, 200, 400, 500, 500];
        for (attempt, delay) in (1..).zip(expected) {
            let delay = Duration::from_millis(delay);
            assert_eq!(b.pause(attempt, |_| 0), delay / 2, "attempt {attempt}");
            assert_eq!(b.pause(attempt, |most| most), delay, "attempt {attempt}");
            let j = b.jittered(attempt);
            assert!(j >= delay / 2 && j <= delay, "attempt {attempt}: {j:?}");
        }
        assert_eq!(b.pause(u32::MAX, |most| most), b.most, "no overflow");
    }
}
