//! `relist-storm`: every client LISTs (resourceVersion=0) and watches from the list's RV
//! with bookmarks, as a reflector does; then all drop their watches and relist at the same
//! instant. What is reported is the second LIST.

use std::sync::Arc;
use std::time::Instant;

use super::list::{fetch, with_query};
use crate::report::ClientResult;
use crate::{Args, events};

/// One client of the storm.
pub async fn client(
    args: Arc<Args>,
    host: String,
    start: Arc<tokio::sync::Barrier>,
    relist: Arc<tokio::sync::Barrier>,
) -> ClientResult {
    start.wait().await;
    let t = Instant::now();
    let base = &args.path;
    let list = with_query(base, "resourceVersion=0");
    let mut first = ClientResult::default();
    let rv = match fetch(&args, &host, &list, false, &mut first).await {
        Ok((_, meta)) => meta.rv.unwrap_or_else(|| "0".into()),
        Err(e) => {
            // Still meet the others at the relist barrier, or they would wait forever.
            relist.wait().await;
            first.error = Some(e);
            return first;
        }
    };
    let path = with_query(
        base,
        &format!("watch=1&resourceVersion={rv}&allowWatchBookmarks=true"),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (h, protobuf) = (host.clone(), args.form.protobuf);
    let watch = tokio::spawn(async move {
        events::watch(&h, &path, protobuf, stopped, |_, _| {
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .await
    });
    relist.wait().await;
    let _ = stop.send(true);
    let mut res = ClientResult::default();
    match fetch(&args, &host, &list, false, &mut res).await {
        Ok((n, _)) => res.objects = n,
        Err(e) => res.error = Some(e),
    }
    res.requests = 2;
    match watch.await {
        Ok(Err(e)) => res.error = res.error.take().or(Some(format!("watch: {e}"))),
        Err(e) => res.error = res.error.take().or(Some(e.to_string())),
        Ok(Ok(_)) => {}
    }
    res.seconds = t.elapsed().as_secs_f64();
    res
}
