//! The what-if judges the same workloads twice (today's profiles, then the
//! assumed ones): each image is looked up once and the answer reused, so
//! both judgements read the same content and the registry sees no repeat.

use crate::facts::{ImageProfile, Platform};
use crate::judgement::{ImageLookup, LookupError};
use crate::registry::{CredentialId, Credentials};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

type Answer = Result<ImageProfile, LookupError>;

/// Answers of one `check` run, by (image, platform, the credential that
/// read it). Holds at most the distinct keys the run asks for (bounded by
/// its workloads' images).
pub struct Memo {
    inner: Arc<dyn ImageLookup>,
    answers: Mutex<HashMap<(String, String, CredentialId), Answer>>,
}

impl Memo {
    pub fn new(inner: Arc<dyn ImageLookup>) -> Self {
        Memo {
            inner,
            answers: Mutex::new(HashMap::new()),
        }
    }
}

#[async_trait::async_trait]
impl ImageLookup for Memo {
    async fn lookup(
        &self,
        image: &str,
        platform: &Platform,
        credentials: Option<&Credentials>,
    ) -> Answer {
        let key = (
            image.to_string(),
            platform.to_string(),
            Credentials::identity(credentials),
        );
        // A poisoned lock only means another look-up panicked: the map is whole.
        let known = self
            .answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        if let Some(answer) = known {
            return answer;
        }
        let answer = self.inner.lookup(image, platform, credentials).await;
        self.answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, answer.clone());
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counting(AtomicUsize);

    #[async_trait::async_trait]
    impl ImageLookup for Counting {
        async fn lookup(&self, image: &str, _: &Platform, _: Option<&Credentials>) -> Answer {
            self.0.fetch_add(1, Ordering::SeqCst);
            Err(LookupError::not_found(format!("{image} is not there")))
        }
    }

    #[tokio::test]
    async fn each_image_and_platform_is_asked_once() {
        let counting = Arc::new(Counting(AtomicUsize::new(0)));
        let memo = Memo::new(counting.clone());
        let amd = Platform::linux_amd64();
        let arm: Platform = "linux/arm64".parse().unwrap();
        for _ in 0..3 {
            let e = memo.lookup("a:1", &amd, None).await.unwrap_err();
            assert_eq!(e.message, "a:1 is not there");
        }
        memo.lookup("a:1", &arm, None).await.unwrap_err();
        memo.lookup("b:1", &amd, None).await.unwrap_err();
        assert_eq!(counting.0.load(Ordering::SeqCst), 3);
    }
}
