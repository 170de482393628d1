//! The packets other packets are sent after: those the stale copy's
//! rules write a list entry for (`recent --set`) that the live copy alone
//! does not, with the entries each leaves now, in each order of the hooks,
//! and after.

use super::host::Host;
use super::packet::{self, ListEntry, Packet};
use super::walk::{fate, fate_ordered, Copy};
use super::{first_stale, order, Place};

/// The most packets other packets are sent after (see the module's note).
pub const PRIMERS: usize = 16;

/// A packet the stale copy's rules write into a list for: the lists it
/// leaves now (in each order of [`order::orders`]) and after, and what
/// only now holds, said.
pub struct Primer {
    pub packet: Packet,
    by_order: Vec<(u8, Vec<ListEntry>)>,
    pub after: Vec<ListEntry>,
    pub said: String,
    /// The first stale rule it met (the writer, or one before it).
    pub place: Option<Place>,
}

impl Primer {
    /// The lists it leaves now in `order`.
    pub fn now_in(&self, order: u8) -> &[ListEntry] {
        let found = self.by_order.iter().find(|(o, _)| *o == order);
        found.map_or(&[], |(_, lists)| lists.as_slice())
    }
}

/// The packets the stale copy writes a list entry for that the live copy
/// alone does not: the first [`PRIMERS`].
pub fn primers(stale: &Copy, live: &Copy, host: &Host, packets: &[Packet], contested: u8) -> Vec<Primer> {
    let mut primers = Vec::new();
    for packet in packets {
        let after = fate(&[live], host, packet).packet.lists;
        let stale_first = fate(&[stale, live], host, packet);
        let place = first_stale(&stale_first.steps, stale.backend);
        let mut now = stale_first.packet.lists;
        for entry in fate(&[live, stale], host, packet).packet.lists {
            if !now.contains(&entry) {
                now.push(entry);
            }
        }
        if let Some((name, _)) = now.iter().find(|e| !after.contains(e)) {
            let said = format!(
                "sent after {packet}, whose address the {} rules put in list {}",
                stale.backend,
                String::from_utf8_lossy(name),
            );
            // What it leaves in each order: only where the stale rule
            // runs before a live one stops it is the entry written.
            let by_order = order::orders(contested, packet::Way::Output)
                .into_iter()
                .map(|o| (o, fate_ordered(&[stale, live], o, host, packet).packet.lists))
                .collect();
            primers.push(Primer {
                packet: packet.clone(),
                by_order,
                after,
                said,
                place,
            });
            if primers.len() == PRIMERS {
                break;
            }
        }
    }
    primers
}
