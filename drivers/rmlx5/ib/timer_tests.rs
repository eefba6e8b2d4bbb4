// SPDX-License-Identifier: GPL-2.0

//! KUnit suite `rmlx5_clock`: the model's clock driven by the `SoftHca`
//! hrtimer makes RNR and transport retries fire, succeed or give up.

use kernel::{
    prelude::*,
    time::{
        delay::fsleep,
        Delta, //
    },
};

use super::{
    cq::*,
    qp::*,
    tests::{
        poll_n,
        Pair,
        Retry, //
    },
};

/// RNR NAK timer code 14: 1.28 ms between retries.
const RNR_TIMER_1_28_MS: u8 = 14;

fn timer_fires() -> Result<u64> {
    Ok(crate::soft()?.state.lock().timer_fires)
}

fn send(p: &Pair, wr_id: u64) -> Result {
    let s = [p.sge(0, 0, 32)];
    p.qps[0]
        .post_send(&[SendReq {
            wr_id,
            sges: &s,
            opcode: WR_SEND,
            flags: SEND_SIGNALED,
            ..Default::default()
        }])
        .map_err(|(_, e)| e)
}

#[kunit_tests(rmlx5_clock)]
mod clock {
    use super::*;

    /// A SEND that finds no receive waits on the RNR timer (rnr_retry 7 =
    /// forever) and completes once a receive is posted, at the next retry.
    #[test]
    fn rnr_retry_forever_completes_after_recv() -> Result {
        let r = Retry {
            min_rnr_timer: RNR_TIMER_1_28_MS,
            ..Retry::DEFAULT
        };
        let p = Pair::new_with(None, r, true)?;
        let fires = timer_fires()?;
        send(&p, 1)?;
        // Several RNR periods with no receive: nothing completes, but the
        // timer fired (each expiry is one retry).
        fsleep(Delta::from_millis(20));
        let mut wc = [Wc::default(); 2];
        assert_eq!(p.cqs[0].poll(&mut wc), 0);
        let during = timer_fires()?;
        assert!(during > fires);
        let rr = [p.sge(1, 0, 64)];
        p.qps[1].post_recv(&[(9, &rr)]).map_err(|(_, e)| e)?;
        let w0 = poll_n(&p.cqs[0], 1)?;
        assert_eq!(w0[0].status, WC_SUCCESS);
        assert_eq!(w0[0].wr_id, 1);
        let w1 = poll_n(&p.cqs[1], 1)?;
        assert_eq!(w1[0].status, WC_SUCCESS);
        assert_eq!(w1[0].wr_id, 9);
        assert_eq!(w1[0].byte_len, 32);
        pr_info!(
            "rnr forever: {} timer expiries before the receive\n",
            during - fires
        );
        p.destroy()
    }

    /// CVE-2026-45910: a QP's timer or work item ran after the QP was
    /// destroyed. Here a QP waiting on its RNR retry timer is destroyed: the
    /// expiry armed before finds no QP to retry, no later expiry is armed,
    /// and nothing touches the freed QP (KASAN watches).
    #[test]
    fn cve_2026_45910_qp_destroyed_while_its_retry_timer_is_armed() -> Result {
        let soft = crate::soft()?;
        let r = Retry {
            min_rnr_timer: RNR_TIMER_1_28_MS,
            ..Retry::DEFAULT
        };
        let p = Pair::new_with(None, r, true)?;
        send(&p, 1)?;
        fsleep(Delta::from_millis(5));
        assert!(soft.state.lock().timer_at.is_some());
        p.destroy()?;
        let fires = timer_fires()?;
        fsleep(Delta::from_millis(20));
        assert!(timer_fires()? <= fires + 1);
        let mut st = soft.state.lock();
        assert!(st.timer_at.is_none());
        assert_eq!(st.fabric.next_deadline(), None);
        Ok(())
    }

    /// With rnr_retry 2 the SEND gives up with RNR_RETRY_EXC after two
    /// retries; the QP goes to ERR and the WR behind it is flushed.
    #[test]
    fn rnr_retry_exceeded_then_flush() -> Result {
        let r = Retry {
            min_rnr_timer: RNR_TIMER_1_28_MS,
            rnr_retry: 2,
            ..Retry::DEFAULT
        };
        let p = Pair::new_with(None, r, true)?;
        send(&p, 1)?;
        send(&p, 2)?;
        let w = poll_n(&p.cqs[0], 2)?;
        assert_eq!(w[0].wr_id, 1);
        assert_eq!(w[0].status, WC_RNR_RETRY_EXC_ERR);
        assert_eq!(w[1].wr_id, 2);
        assert_eq!(w[1].status, WC_WR_FLUSH_ERR);
        p.destroy()
    }

    /// A peer that never reached RTR never answers: after `retry_cnt`
    /// local ACK timeouts the SEND fails with TRANSPORT_RETRY_EXC and the
    /// WR behind it is flushed.
    #[test]
    fn transport_retry_exceeded_peer_not_rtr() -> Result {
        let r = Retry {
            // 4.096 us * 2^10 = 4.2 ms per timeout, two retries.
            timeout: 10,
            retry_cnt: 2,
            ..Retry::DEFAULT
        };
        let p = Pair::new_with(None, r, false)?;
        let fires = timer_fires()?;
        send(&p, 1)?;
        send(&p, 2)?;
        let w = poll_n(&p.cqs[0], 2)?;
        assert_eq!(w[0].wr_id, 1);
        assert_eq!(w[0].status, WC_RETRY_EXC_ERR);
        assert_eq!(w[1].wr_id, 2);
        assert_eq!(w[1].status, WC_WR_FLUSH_ERR);
        // The first attempt and two retries each waited for one timeout.
        assert!(timer_fires()? >= fires + 3);
        p.destroy()
    }
}
