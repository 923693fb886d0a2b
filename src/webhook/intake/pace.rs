//! The minimum rate a review body must arrive at.
//!
//! Rule: `grace` after reading starts, a body of `len` bytes must have
//! `received >= rate(len) * (elapsed - grace)`, where
//! `rate(len) = max(64 KiB/s, len / 30 s)`: a straight line from the end of
//! the grace to the whole body. Each read waits only until the line passes
//! what has arrived, then the request is cut (408) and its share of the
//! budget given back.
//!
//! Why these numbers:
//! - The API server writes a review it holds whole; what slows it is the
//!   link. No API server waits more than 30 s for a webhook
//!   (`timeoutSeconds` is at most 30), so a body slower than `len / 30 s`
//!   can never be answered by anyone: cutting it early loses nothing.
//!   19 MiB needs 650 KiB/s (5.3 Mbit/s); a 10 Mbit/s link takes ~16 s and
//!   stays above the line throughout. The router's own cut (`--timeout` +
//!   1 s, 9 s by default) is what ends such a body on a slow link, not
//!   this rule; raise `--timeout` where `timeoutSeconds` is raised.
//! - 64 KiB/s (0.5 Mbit/s) for smaller bodies: a 100 KiB review must be
//!   whole 3.6 s after reading starts; any link an API server uses is
//!   orders of magnitude faster.
//! - 2 s of grace: a small body arrives in one TCP window, and 2 s covers
//!   slow start over a WAN round trip and a couple of retransmission
//!   timeouts (Linux's minimum is 200 ms) before anything is asked.
//! - It scales with the announced length because the length is what is
//!   reserved: holding 19 MiB of the budget costs a caller 650 KiB/s of
//!   real sending, not one byte every half second (cut after the 2 s grace).
//!
//! A per-read idle timeout alone would not do: one byte every 0.5 s is
//! never idle for long.

use axum::body::HttpBody as Body;
use bytes::{Bytes, BytesMut};
use std::pin::Pin;
use std::time::Duration;
use tokio::time::Instant;

/// How fast a body must arrive; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateFloor {
    pub grace: Duration,
    /// Bytes per second every body must keep up after the grace.
    pub min_bytes_per_second: u64,
    /// The whole body must be on pace to arrive within this after the grace.
    pub whole_within: Duration,
}

/// What `/validate` holds bodies to.
pub const RATE_FLOOR: RateFloor = RateFloor {
    grace: Duration::from_secs(2),
    min_bytes_per_second: 64 << 10,
    whole_within: Duration::from_secs(30),
};

impl RateFloor {
    /// Bytes per second a body of `len` must keep up after the grace.
    pub fn rate(&self, len: u64) -> u64 {
        let whole = len / self.whole_within.as_secs().max(1);
        self.min_bytes_per_second.max(whole).max(1)
    }

    /// How long after reading starts a body of `len` that has `received`
    /// bytes may go before more must have arrived.
    pub fn due(&self, len: u64, received: u64) -> Duration {
        self.grace + Duration::from_secs_f64(received as f64 / self.rate(len) as f64)
    }
}

/// Why a body was not read whole.
#[derive(Debug, PartialEq, Eq)]
pub enum Unread {
    /// It fell below the rate floor (408).
    TooSlow,
    /// The connection broke, or the body ended short of its length (400).
    Broken,
}

/// Read a body announcing `len` bytes into one buffer of exactly that size
/// (no second copy while it is collected), held to `floor`.
pub async fn read<B>(mut body: B, len: u64, floor: &RateFloor) -> Result<Bytes, Unread>
where
    B: Body<Data = Bytes> + Unpin,
{
    let start = Instant::now();
    let want = usize::try_from(len).map_err(|_| Unread::Broken)?;
    let mut buf = BytesMut::with_capacity(want);
    while buf.len() < want {
        let due = start + floor.due(len, buf.len() as u64);
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
        match tokio::time::timeout_at(due, frame).await {
            Err(_) => return Err(Unread::TooSlow),
            Ok(None | Some(Err(_))) => return Err(Unread::Broken),
            Ok(Some(Ok(frame))) => {
                // Trailers carry nothing a review needs.
                if let Ok(data) = frame.into_data() {
                    if data.len() > want - buf.len() {
                        return Err(Unread::Broken);
                    }
                    buf.extend_from_slice(&data);
                }
            }
        }
    }
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::intake::MAX_BODY_BYTES;
    use axum::body::Body as AxumBody;

    const MIB: u64 = 1 << 20;

    /// Would a body of `len` arriving as `(at seconds, bytes)` be cut? The
    /// same test as [`read`]: the time of each arrival against the due time
    /// of what had arrived before it.
    fn cut(floor: &RateFloor, len: u64, arrivals: impl IntoIterator<Item = (f64, u64)>) -> bool {
        let mut received = 0;
        for (at, n) in arrivals {
            if at > floor.due(len, received).as_secs_f64() {
                return true;
            }
            received += n;
            if received >= len {
                return false;
            }
        }
        true
    }

    /// A body of `len` at `bytes_per_second` in 16 KiB TLS records.
    fn steady(len: u64, bytes_per_second: f64) -> impl Iterator<Item = (f64, u64)> {
        let record = 16 << 10;
        (0..len.div_ceil(record))
            .map(move |i| ((i + 1) as f64 * record as f64 / bytes_per_second, record))
    }

    #[test]
    fn the_rate_is_the_floor_or_the_pace_of_the_whole_body_in_30_s() {
        assert_eq!(RATE_FLOOR.rate(2048), 64 << 10);
        assert_eq!(
            RATE_FLOOR.rate(MAX_BODY_BYTES as u64),
            MAX_BODY_BYTES as u64 / 30
        );
        assert_eq!(
            RATE_FLOOR.due(MAX_BODY_BYTES as u64, 0),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn a_largest_review_over_a_10_mbit_link_is_never_cut() {
        let max = MAX_BODY_BYTES as u64;
        let ten_mbit = 10e6 / 8.0;
        assert!(!cut(&RATE_FLOOR, max, steady(max, ten_mbit)));
        // A 100 KiB review at 1 Mbit/s, starting after a 1.5 s stall.
        let late = steady(100 << 10, 1e6 / 8.0).map(|(t, n)| (t + 1.5, n));
        assert!(!cut(&RATE_FLOOR, 100 << 10, late));
        // A body that could not arrive within the API server's 30 s at
        // its pace is cut (19 MiB at 4 Mbit/s takes 40 s).
        assert!(cut(&RATE_FLOOR, max, steady(max, 4e6 / 8.0)));
    }

    #[test]
    fn a_trickle_is_cut_right_after_the_grace() {
        // One byte every 0.5 s, announcing 19 MiB or 1 KiB.
        for len in [MAX_BODY_BYTES as u64, 1024] {
            let trickle = (1..).map(|i| (i as f64 * 0.5, 1));
            assert!(cut(&RATE_FLOOR, len, trickle.take(10)));
            assert!(RATE_FLOOR.due(len, 4) < Duration::from_millis(2001));
        }
        // Sending the first half fast buys time, but only what it paid for.
        let half = 10 * MIB;
        let rate = RATE_FLOOR.rate(2 * half) as f64;
        let due = RATE_FLOOR.due(2 * half, half).as_secs_f64();
        assert!((due - (2.0 + half as f64 / rate)).abs() < 1e-6);
    }

    fn floor_ms(grace: u64, min_bytes_per_second: u64) -> RateFloor {
        RateFloor {
            grace: Duration::from_millis(grace),
            min_bytes_per_second,
            whole_within: Duration::from_secs(30),
        }
    }

    /// A body sending `piece` bytes every `pace`, `pieces` times.
    fn paced(piece: usize, pace: Duration, pieces: usize) -> AxumBody {
        let chunks = futures::stream::unfold(0, move |i| async move {
            if i == pieces {
                return None;
            }
            tokio::time::sleep(pace).await;
            Some((
                Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; piece])),
                i + 1,
            ))
        });
        AxumBody::from_stream(chunks)
    }

    #[tokio::test]
    async fn read_takes_a_body_on_pace_whole_and_cuts_a_trickle() {
        let floor = floor_ms(200, 10_000);
        let body = paced(1000, Duration::from_millis(20), 10);
        let got = read(body, 10_000, &floor).await.unwrap();
        assert_eq!(got.len(), 10_000);

        let start = std::time::Instant::now();
        let trickle = paced(1, Duration::from_millis(50), 1000);
        assert_eq!(read(trickle, 10_000, &floor).await, Err(Unread::TooSlow));
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_millis(600),
            "cut after the grace: {took:?}"
        );
    }

    #[tokio::test]
    async fn a_body_short_or_long_of_its_length_is_broken() {
        let floor = floor_ms(200, 10_000);
        let short = paced(100, Duration::ZERO, 2);
        assert_eq!(read(short, 300, &floor).await, Err(Unread::Broken));
        // Bytes past the length are not asked for; a piece over it is broken.
        let long = paced(400, Duration::ZERO, 1);
        assert_eq!(read(long, 300, &floor).await, Err(Unread::Broken));
        let empty = read(AxumBody::empty(), 0, &floor).await.unwrap();
        assert!(empty.is_empty());
    }
}
