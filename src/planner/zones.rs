//! How the voters lie across Availability Zones, and what one zone's loss would cost: a
//! report (metrics, `status`), not a rule. Auto Scaling balances a group's instances across its
//! zones; with two zones three voters lie 2 + 1 and five 3 + 2, and losing the larger zone stops
//! every write. Three zones keep a quorum through any one's loss
//! (<https://docs.aws.amazon.com/autoscaling/ec2/userguide/auto-scaling-benefits.html>).

use std::collections::BTreeMap;

use crate::model::{quorum, ClusterState, Observation};

/// Zones a group should span: with three, any one's loss leaves a majority of evenly spread
/// voters.
pub const ZONES_WANTED: usize = 3;

/// What one zone's loss would leave.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ZoneLoss {
    /// The zone whose loss would hurt most (most answering voters).
    pub zone: String,
    /// Answering voters outside it, and the quorum of all voters.
    pub left: usize,
    pub quorum: usize,
    /// Answering voters by zone.
    pub voters: BTreeMap<String, usize>,
}

impl ZoneLoss {
    /// `left` less the quorum: below 0, that zone's loss stops every write.
    pub fn margin(&self) -> i64 {
        self.left as i64 - self.quorum as i64
    }
}

/// The worst one zone's loss would do, for a cluster that answers; None otherwise.
pub fn worst_zone_loss(obs: &Observation) -> Option<ZoneLoss> {
    let ClusterState::Known(view) = &obs.cluster else {
        return None;
    };
    // A voter whose instance left the group, or whose zone is not known, is in no zone: it is
    // counted as answering, in none.
    let zone_of = |name: &str| obs.instance(name).and_then(|i| i.zone.clone());
    let mut voters: BTreeMap<String, usize> = obs.zones.iter().map(|z| (z.clone(), 0)).collect();
    let mut answering = 0;
    for m in view.voters().filter(|m| view.healthy.contains(&m.id)) {
        if let Some(zone) = zone_of(&m.name) {
            *voters.entry(zone).or_default() += 1;
        }
        answering += 1;
    }
    let (zone, most) = voters
        .iter()
        .max_by_key(|(z, n)| (**n, std::cmp::Reverse((*z).clone())))
        .map(|(z, n)| (z.clone(), *n))
        .unwrap_or_else(|| ("?".into(), 0));
    Some(ZoneLoss {
        zone,
        left: answering - most,
        quorum: quorum(view.voters().count()),
        voters,
    })
}

/// Whether the group or its voters are at risk from one zone's loss: fewer than three zones, or
/// a zone whose loss would leave the voters without a quorum. A cluster of one member has no
/// failure to spare anywhere: never reported.
pub fn zone_risk(obs: &Observation) -> Option<String> {
    let loss = worst_zone_loss(obs);
    if loss.as_ref().is_some_and(|l| l.quorum == 1) {
        return None;
    }
    if obs.zones.len() < ZONES_WANTED {
        return Some(format!(
            "the group spans {} Availability Zone(s) ({}): with fewer than {ZONES_WANTED}, one zone's loss can take a majority of the voters (give it subnets in {ZONES_WANTED} zones)",
            obs.zones.len(),
            obs.zones.join(", ")
        ));
    }
    let loss = loss.filter(|l| l.margin() < 0)?;
    Some(format!(
        "losing {} would leave {} answering voter(s) of a quorum of {} (voters by zone: {:?}): writes would stop",
        loss.zone, loss.left, loss.quorum, loss.voters
    ))
}
