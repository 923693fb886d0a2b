//! Which report APIs the cluster serves: the one call of this module to the
//! API server, shared by the controller (which writes to the first) and
//! `status` (which reads from it), so both choose the same API.

use super::ReportApi;

/// The report APIs the cluster serves, in order of preference
/// ([`ReportApi::ALL`]). A group the API server does not know (404) is not
/// served; any other error is returned.
pub async fn served_apis(client: &kube::Client) -> Result<Vec<ReportApi>, kube::Error> {
    let mut served = Vec::new();
    for api in ReportApi::ALL {
        match client.list_api_group_resources(api.api_version()).await {
            Ok(list) if list.resources.iter().any(|r| r.name == api.plural()) => served.push(api),
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(error) => return Err(error),
        }
    }
    Ok(served)
}
