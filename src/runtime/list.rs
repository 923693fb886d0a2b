//! Paged lists, for the commands that read a cluster once (`status`,
//! `check`) rather than watch it.

/// A cluster-scoped kind with a static type (every k8s-openapi and
/// nfguard.io kind), the kinds `list_all` reads.
pub trait ClusterKind:
    kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> ClusterKind for K where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// Every object of a cluster-scoped kind, read 500 per page so a large
/// cluster never answers one huge list.
pub async fn list_all<K: ClusterKind>(client: &kube::Client) -> Result<Vec<K>, kube::Error> {
    list_kept(client, None, Some).await
}

/// Objects of any kind across all namespaces, 500 per page; `keep` maps each
/// one to what the caller holds on to (None: dropped at once), so only the
/// kept part of a large list stays in memory. `fields`: a field selector.
pub async fn list_kept<K, T>(
    client: &kube::Client,
    fields: Option<&str>,
    mut keep: impl FnMut(K) -> Option<T>,
) -> Result<Vec<T>, kube::Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let api: kube::Api<K> = kube::Api::all(client.clone());
    let mut out = Vec::new();
    let mut params = kube::api::ListParams::default().limit(500);
    if let Some(f) = fields {
        params = params.fields(f);
    }
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items.into_iter().filter_map(&mut keep));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}
