"""The demo's corpus: the help centre of a made-up notes app, "Northwind", in English and Japanese.

Forty-eight short documents over five topics (billing, API, security, product, workplace policy), two
thirds English and one third Japanese, each with a stable id, and demo questions that name the documents
answering them, so tests can check the retriever and the demo can send realistic traffic.
"""

# ruff: noqa: RUF001 - Japanese text, with its full-width punctuation and katakana, on purpose

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from cp_observe.demo._rag import Document

__all__ = ["CORPUS", "QUESTIONS", "DemoQuestion"]


@dataclass(frozen=True, slots=True)
class DemoQuestion:
    """A question the demo asks, and the ids of the documents that answer it.

    Attributes:
        text: the question.
        answer_ids: ids of the documents holding the answer (any one of them is a correct first hit).
        lang: the question's language, ``"en"`` or ``"ja"``.

    """

    text: str
    answer_ids: tuple[str, ...]
    lang: str = "en"


def _en(doc_id: str, text: str) -> Document:
    return Document(doc_id, text, "en")


def _ja(doc_id: str, text: str) -> Document:
    return Document(doc_id, text, "ja")


CORPUS: Final[tuple[Document, ...]] = (
    # --- billing ---
    _en(
        "billing-plans",
        "Northwind offers three plans: Free, Team at $8 per user per month, and Business at $15 per user per "
        "month. Paying annually saves 20%.",
    ),
    _en(
        "billing-refund",
        "Annual subscriptions can be refunded in full within 30 days of purchase. After 30 days, annual plans "
        "are non-refundable but stay active until the end of the term.",
    ),
    _en(
        "billing-cancel",
        "Monthly plans can be cancelled at any time from Billing > Subscription. Access continues until the end "
        "of the current billing period, and no partial refunds are issued.",
    ),
    _en(
        "billing-invoices",
        "Invoices are emailed to the billing contact on the first day of each billing cycle. Past invoices can "
        "be downloaded as PDF files from Billing > Invoices.",
    ),
    _en(
        "billing-payment",
        "We accept Visa, Mastercard and American Express. Business customers paying annually can also pay by "
        "bank transfer.",
    ),
    _en(
        "billing-tax",
        "Prices exclude VAT and sales tax. Tax is calculated from your billing address and shown on each invoice.",
    ),
    _en(
        "billing-seats",
        "Adding a member to a paid workspace adds a seat immediately; the charge is prorated for the rest of "
        "the billing period.",
    ),
    # --- API ---
    _en(
        "api-rate-limit",
        "The REST API allows 60 requests per minute on the Free plan and 600 requests per minute on Team and "
        "Business. Requests over the limit receive HTTP 429 with a Retry-After header.",
    ),
    _en(
        "api-keys",
        "API keys are created under Settings > API. Each key is shown only once, so store it in a secret "
        "manager; you can revoke a key at any time.",
    ),
    _en(
        "api-auth",
        "Authenticate API requests by sending your API key in the Authorization header as a Bearer token. "
        "Requests without a valid key are rejected with HTTP 401.",
    ),
    _en(
        "api-webhooks",
        "Webhooks notify your endpoint when a note is created, updated or deleted. Failed deliveries are "
        "retried up to 8 times over 24 hours with exponential backoff.",
    ),
    _en(
        "api-webhook-signature",
        "Every webhook request carries an X-Northwind-Signature header: an HMAC-SHA256 of the body computed "
        "with your webhook secret. Reject requests whose signature does not match.",
    ),
    _en(
        "api-pagination",
        "List endpoints return at most 100 items per page. Pass the next_cursor value from a response to fetch "
        "the following page.",
    ),
    _en(
        "api-sdk",
        "Official SDKs exist for Python (pip install northwind) and JavaScript (npm install @northwind/sdk). "
        "Both wrap the REST API and retry failed requests.",
    ),
    # --- security and data ---
    _en(
        "security-sso",
        "SAML single sign-on is available on the Business plan. Set it up under Admin > Security > SSO by "
        "uploading your identity provider's metadata XML.",
    ),
    _en(
        "security-2fa",
        "Each user can turn on two-factor authentication with an authenticator app. Admins on Team and "
        "Business can require two-factor authentication for the whole workspace.",
    ),
    _en(
        "security-encryption",
        "All data is encrypted in transit with TLS 1.2 or higher and at rest with AES-256.",
    ),
    _en(
        "security-retention",
        "Deleted notes stay in the trash for 30 days and are then permanently erased. Backups are kept for a "
        "further 35 days before they expire.",
    ),
    _en(
        "security-export",
        "Workspace owners can export all notes as a ZIP of Markdown files from Settings > Data > Export. The "
        "download link is emailed within 24 hours.",
    ),
    _en(
        "security-region",
        "Your data is stored in the EU region (Frankfurt) or the US region (Oregon), chosen when the workspace "
        "is created. The region cannot be changed later.",
    ),
    _en(
        "security-audit-log",
        "Business workspaces keep an audit log of sign-ins, permission changes and exports for one year.",
    ),
    # --- product ---
    _en(
        "product-offline",
        "The mobile apps keep your 200 most recent notes available offline. Changes made offline sync "
        "automatically when the device reconnects.",
    ),
    _en(
        "product-sharing",
        "Notes can be shared with people outside the workspace through a public link. Admins can turn public "
        "links off for the whole workspace.",
    ),
    _en(
        "product-search",
        "Search covers note titles, bodies and attachments. Text in PDFs and images is indexed within a few "
        "minutes of upload.",
    ),
    _en(
        "product-attachments",
        "The maximum attachment size is 100 MB per file on paid plans and 10 MB on the Free plan.",
    ),
    _en(
        "product-history",
        "Every note keeps a version history. Free workspaces keep 7 days of history; paid plans keep it forever.",
    ),
    _en(
        "product-templates",
        "Templates let you start a note from a saved structure. Workspace admins can publish templates for everyone.",
    ),
    # --- workplace policy ---
    _en(
        "hr-vacation",
        "Full-time employees receive 25 days of paid vacation per year, plus public holidays. Up to 5 unused "
        "days can be carried over to the next year.",
    ),
    _en(
        "hr-remote",
        "Employees may work remotely up to three days a week. Tuesdays and Thursdays are office days for all teams.",
    ),
    _en(
        "hr-expenses",
        "Travel expenses must be submitted within 30 days with receipts. Meals on business trips are "
        "reimbursed up to 60 euros per day.",
    ),
    _en(
        "hr-equipment",
        "New employees receive a laptop and a 500 euro budget for home-office equipment in their first month.",
    ),
    _en(
        "hr-parental",
        "Parents receive 20 weeks of fully paid parental leave, to be taken during the child's first two years.",
    ),
    # --- Japanese ---
    _ja(
        "ja-billing-plans",
        "Northwindには、無料プラン、1ユーザーあたり月額1,200円のチームプラン、月額2,200円のビジネスプランが"
        "あります。年払いにすると20%割引になります。",
    ),
    _ja(
        "ja-billing-refund",
        "年間プランは、購入から30日以内であれば全額返金されます。30日を過ぎると返金はできませんが、"
        "契約期間の終了まで利用できます。",
    ),
    _ja(
        "ja-billing-invoice",
        "請求書は毎月1日に請求先のメールアドレスへ送信されます。過去の請求書は「請求」→「請求書」から"
        "PDFでダウンロードできます。",
    ),
    _ja(
        "ja-billing-payment",
        "お支払いには、Visa、Mastercard、JCB、American Expressのクレジットカードをご利用いただけます。"
        "年払いのビジネスプランは銀行振込にも対応しています。",
    ),
    _ja(
        "ja-api-rate-limit",
        "REST APIのレート制限は、無料プランで1分あたり60リクエスト、有料プランで1分あたり600リクエストです。"
        "上限を超えるとHTTP 429が返されます。",
    ),
    _ja(
        "ja-api-keys",
        "APIキーは「設定」→「API」から作成できます。キーは作成時に一度だけ表示されるため、"
        "安全な場所に保管してください。",
    ),
    _ja(
        "ja-api-webhooks",
        "Webhookの配信に失敗した場合は、指数バックオフで24時間にわたり最大8回まで再送されます。",
    ),
    _ja(
        "ja-security-sso",
        "SAMLシングルサインオンはビジネスプランで利用できます。「管理」→「セキュリティ」→「SSO」で"
        "IdPのメタデータXMLをアップロードして設定します。",
    ),
    _ja(
        "ja-security-2fa",
        "2段階認証は、各ユーザーが認証アプリを使って有効にできます。管理者はワークスペース全体に"
        "2段階認証を必須にできます。",
    ),
    _ja(
        "ja-security-retention",
        "削除したノートは30日間ゴミ箱に保存され、その後完全に消去されます。バックアップはさらに35日間保持されます。",
    ),
    _ja(
        "ja-security-region",
        "日本のお客様は、ワークスペースの作成時にデータの保存先として東京リージョンを選べます。"
        "作成後に保存先を変更することはできません。",
    ),
    _ja(
        "ja-product-offline",
        "モバイルアプリでは、最近の200件のノートをオフラインで閲覧・編集できます。オンラインに戻ると"
        "自動的に同期されます。",
    ),
    _ja(
        "ja-product-attachments",
        "添付ファイルの上限は、有料プランで1ファイル100MB、無料プランで10MBです。",
    ),
    _ja(
        "ja-hr-vacation",
        "東京オフィスの正社員には、年間20日の有給休暇が付与されます。未使用分は翌年に最大5日まで繰り越せます。",
    ),
    _ja(
        "ja-hr-remote",
        "東京オフィスでは週3日まで在宅勤務が可能です。火曜日と木曜日は全員出社日です。",
    ),
    _ja(
        "ja-hr-commute",
        "通勤手当として、公共交通機関の定期券代を月額5万円まで支給します。",
    ),
)

QUESTIONS: Final[tuple[DemoQuestion, ...]] = (
    DemoQuestion("How much does the Team plan cost?", ("billing-plans",)),
    DemoQuestion("Can I get a refund on an annual subscription?", ("billing-refund",)),
    DemoQuestion("How do I cancel a monthly plan?", ("billing-cancel",)),
    DemoQuestion("Where can I download past invoices?", ("billing-invoices",)),
    DemoQuestion("Can I pay by bank transfer?", ("billing-payment",)),
    DemoQuestion("What is the API rate limit on the Free plan?", ("api-rate-limit",)),
    DemoQuestion("How do I authenticate API requests?", ("api-auth",)),
    DemoQuestion("How many times are failed webhook deliveries retried?", ("api-webhooks",)),
    DemoQuestion("How do I verify a webhook signature?", ("api-webhook-signature",)),
    DemoQuestion("How do I install the Python SDK?", ("api-sdk",)),
    DemoQuestion("How do I set up SAML single sign-on?", ("security-sso",)),
    DemoQuestion("Can admins require two-factor authentication for everyone?", ("security-2fa",)),
    DemoQuestion("How long are deleted notes kept in the trash?", ("security-retention",)),
    DemoQuestion("Which region is my data stored in?", ("security-region",)),
    DemoQuestion("Do the mobile apps work offline?", ("product-offline",)),
    DemoQuestion("What is the maximum attachment size?", ("product-attachments",)),
    DemoQuestion("How many vacation days do employees get?", ("hr-vacation",)),
    DemoQuestion("How many days a week can I work remotely?", ("hr-remote",)),
    DemoQuestion("How much are meals reimbursed on business trips?", ("hr-expenses",)),
    DemoQuestion("チームプランの料金はいくらですか？", ("ja-billing-plans",), "ja"),
    DemoQuestion("年間プランは返金できますか？", ("ja-billing-refund",), "ja"),
    DemoQuestion("APIのレート制限を教えてください。", ("ja-api-rate-limit",), "ja"),
    DemoQuestion("Webhookの配信に失敗したら何回再送されますか？", ("ja-api-webhooks",), "ja"),
    DemoQuestion("SAMLのシングルサインオンはどう設定しますか？", ("ja-security-sso",), "ja"),
    DemoQuestion("削除したノートは何日間ゴミ箱に残りますか？", ("ja-security-retention",), "ja"),
    DemoQuestion("モバイルアプリはオフラインで使えますか？", ("ja-product-offline",), "ja"),
    DemoQuestion("有給休暇は何日もらえますか？", ("ja-hr-vacation",), "ja"),
    DemoQuestion("通勤手当はいくらまで支給されますか？", ("ja-hr-commute",), "ja"),
)
